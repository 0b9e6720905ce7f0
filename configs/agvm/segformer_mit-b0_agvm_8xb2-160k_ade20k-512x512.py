# SegFormer MiT-B0 on ADE20K, mmseg's stock AdamW recipe (8 GPUs x 2 images,
# lr 6e-5, weight decay 0.01, head LR x10, 1500-iteration linear warm-up,
# poly decay, 160k iterations) with AGVM in the paper's AdamW mode: the
# gradient variance of g / (sqrt(v) + eps) (statistic='adam'), modules
# backbone and decode_head, from 100 iterations after the warm-up, tau = 10.
# Halves: ranks 0-3 and 4-7. At another batch, scale the LR and the
# iteration counts (docs/en/agvm.md, "A recipe at another batch").
_base_ = 'mmseg::segformer/segformer_mit-b0_8xb2-160k_ade20k-512x512.py'

warmup_iters = 1500  # the stock LinearLR warm-up

optim_wrapper = dict(
    type='mmext.AGVMOptimWrapper',  # was 'OptimWrapper'
    constructor='mmext.AGVMOptimWrapperConstructor',
    module_names=['backbone', 'decode_head'],
    statistic='adam',
    update_interval=10,
    start_iter=warmup_iters + 100,
    # The stock keys, less 'pos_block' (PVT's name), which matches no
    # parameter of mmseg's MiT: every parameter keeps its options.
    paramwise_cfg=dict(
        _delete_=True,
        custom_keys={
            'norm': dict(decay_mult=0.),
            'head': dict(lr_mult=10.)
        }))
# --auto-scale-lr: the stock recipe's LR is for 16 images per step.
auto_scale_lr = dict(enable=False, base_batch_size=16)
# Stop at the first non-finite loss or gradient, naming it
# (mmext.NaNGuardHook).
custom_hooks = [dict(type='mmext.NaNGuardHook')]
# mmext.Runner (also with the toolboxes' own tools/train.py): auto_scale_lr by
# the effective batch (loader x world size x accumulative_counts), mmext's
# resume checks.
runner_type = 'mmext.Runner'
