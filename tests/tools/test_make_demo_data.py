"""tools/make_demo_data.py: the generated video and detection sets."""
import json
import os.path as osp
import sys

import decord
import numpy as np
from helpers import run_tool

from tools.make_demo_data import DIRECTIONS  # noqa: E402


def square_centre(frame):
    """(x, y) centre of the bright square in an (H, W, 3) frame."""
    ys, xs = np.nonzero(frame.max(axis=-1) > 140)
    return xs.mean(), ys.mean()


def test_video_classes_are_directions_of_motion(demo_data):
    root = osp.join(demo_data, 'video')
    lines = open(osp.join(root, 'train.txt')).read().split('\n')
    lines = [line.split() for line in lines if line]
    labels = [int(label) for _, label in lines]
    assert sorted(set(labels)) == [0, 1, 2, 3]
    for name, label in lines[::7]:
        video = decord.VideoReader(osp.join(root, name))
        first, last = video[0].asnumpy(), video[len(video) - 1].asnumpy()
        assert first.shape == (64, 64, 3) and len(video) == 32
        (x0, y0), (x1, y1) = square_centre(first), square_centre(last)
        dx, dy = x1 - x0, y1 - y0
        motion = {'right': dx, 'left': -dx, 'down': dy, 'up': -dy}
        assert DIRECTIONS[int(label)] == max(motion, key=motion.get)
        assert motion[DIRECTIONS[int(label)]] > 30  # pixels over the clip


def test_detection_set_is_valid_coco(demo_data):
    root = osp.join(demo_data, 'det')
    for split, num in (('train', 48), ('val', 16)):
        coco = json.load(open(osp.join(root, 'annotations', f'{split}.json')))
        assert len(coco['images']) == num
        assert {c['name'] for c in coco['categories']} == {'rectangle', 'disc'}
        ids = {img['id'] for img in coco['images']}
        assert coco['annotations']
        for ann in coco['annotations']:
            assert ann['image_id'] in ids
            x, y, w, h = ann['bbox']
            assert w > 0 and h > 0 and x + w <= 128 and y + h <= 128
        for img in coco['images']:
            assert osp.exists(osp.join(root, 'images', img['file_name']))


def test_larger_detection_set_alone(tmp_path):
    run_tool([sys.executable, 'tools/make_demo_data.py', '--out',
              str(tmp_path), '--only', 'det', '--det-train', '5',
              '--det-val', '3'])
    assert not osp.exists(tmp_path / 'video')
    for split, num in (('train', 5), ('val', 3)):
        coco = json.load(open(tmp_path / 'det' / 'annotations' /
                              f'{split}.json'))
        assert len(coco['images']) == num
    assert len(list((tmp_path / 'det' / 'images').iterdir())) == 8
