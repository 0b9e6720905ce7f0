"""A test hook recording what each training iteration really received."""
import json
import os.path as osp

from mmengine.dist import get_rank
from mmengine.hooks import Hook
from mmengine.registry import HOOKS


@HOOKS.register_module(force=True)
class ShapeRecorderHook(Hook):
    """Record ``(epoch, iter, inputs shape, lr)``; dump JSON per rank.

    ``stop_after_epoch`` ends training early to simulate an interruption.
    """

    priority = 'LOWEST'

    def __init__(self, stop_after_epoch=None):
        self.records = []
        self.stop_after_epoch = stop_after_epoch

    def before_train_iter(self, runner, batch_idx, data_batch=None):
        lr = runner.optim_wrapper.optimizer.param_groups[0]['lr']
        shapes = sorted({tuple(x.shape) for x in data_batch['inputs']})
        self.records.append(
            dict(epoch=runner.epoch, iter=runner.iter, batch=len(
                data_batch['inputs']), shapes=shapes, lr=lr,
                 max_iters=runner.max_iters))

    def after_train_epoch(self, runner):
        if self.stop_after_epoch is not None and (
                runner.epoch + 1 == self.stop_after_epoch):
            runner.train_loop.stop_training = True

    def after_train(self, runner):
        path = osp.join(runner.work_dir, f'shapes_rank{get_rank()}.json')
        with open(path, 'w') as f:
            json.dump(self.records, f)
