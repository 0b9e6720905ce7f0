# The AGVM demo's recipe without AGVM (docs/en/benchmarks.md, the AGVM demo
# against the plain demo): the plain demo with 2 accumulated micro-batches of 4
# per step and twice its epochs (its 72 optimizer steps), a plain OptimWrapper.
_base_ = './faster-rcnn_r18_fpn_agvm_demo-det.py'

optim_wrapper = dict(
    _delete_=True,
    type='OptimWrapper',
    accumulative_counts=2,
    optimizer=dict(type='SGD', lr=0.01, momentum=0.9, weight_decay=0.0001))
