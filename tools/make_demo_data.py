"""Generate mmext's demo data (synthetic, made in seconds).

Usage: python tools/make_demo_data.py [--out data/demo] [--seed 0]
[--only {video,det}] [--det-train 48] [--det-val 16]

Writes ``video/``, an mmaction2 ``VideoDataset`` (``train.txt``,
``val.txt``, ``label_map.txt``) of clips of a square moving right, left,
down or up (the class: one frame cannot tell it), and ``det/``, a COCO
detection set (``images/``, ``annotations/{train,val}.json``) of
rectangles and discs, both on noisy backgrounds.
"""
import argparse
import json
import os
import os.path as osp

import cv2
import numpy as np

DIRECTIONS = ('right', 'left', 'down', 'up')
VELOCITY = {'right': (1, 0), 'left': (-1, 0), 'down': (0, 1), 'up': (0, -1)}
DET_CLASSES = ('rectangle', 'disc')


def make_clip(rng, direction, size=64, frames=32, square=12):
    """One clip, ``(frames, size, size, 3)`` uint8 BGR, of a moving square."""
    vx, vy = VELOCITY[direction]
    span = size - square
    speed = span / (frames - 1)
    # Start on the side the square moves away from; random offset across.
    start = [rng.uniform(0, span), rng.uniform(0, span)]
    if vx:
        start[0] = 0 if vx > 0 else span
    if vy:
        start[1] = 0 if vy > 0 else span
    color = rng.integers(150, 256, size=3).tolist()
    clip = rng.integers(0, 60, size=(frames, size, size, 3), dtype=np.uint8)
    for t in range(frames):
        x = int(round(start[0] + vx * speed * t))
        y = int(round(start[1] + vy * speed * t))
        clip[t, y:y + square, x:x + square] = color
    return clip


def write_video(path, clip, fps=16):
    h, w = clip.shape[1:3]
    writer = cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*'mp4v'), fps,
                             (w, h))
    if not writer.isOpened():
        raise RuntimeError(f'OpenCV cannot write mp4 video {path}')
    for frame in clip:
        writer.write(frame)
    writer.release()


def make_video_set(root, rng, per_class_train=16, per_class_val=6):
    os.makedirs(osp.join(root, 'videos'), exist_ok=True)
    for split, per_class in (('train', per_class_train),
                             ('val', per_class_val)):
        lines = []
        for label, direction in enumerate(DIRECTIONS):
            for i in range(per_class):
                name = f'videos/{split}_{direction}_{i:03d}.mp4'
                write_video(osp.join(root, name), make_clip(rng, direction))
                lines.append(f'{name} {label}')
        with open(osp.join(root, f'{split}.txt'), 'w') as f:
            f.write('\n'.join(lines) + '\n')
    with open(osp.join(root, 'label_map.txt'), 'w') as f:
        f.write('\n'.join(DIRECTIONS) + '\n')


def make_det_image(rng, size=128, max_objects=3):
    """An image ``(size, size, 3)`` uint8 and its ``(bbox, category)`` list."""
    img = rng.integers(0, 80, size=(size, size, 3), dtype=np.uint8)
    objects = []
    for _ in range(rng.integers(1, max_objects + 1)):
        w, h = rng.integers(16, 48, size=2)
        x, y = rng.integers(0, size - w), rng.integers(0, size - h)
        cat = int(rng.integers(0, len(DET_CLASSES)))
        color = rng.integers(120, 256, size=3).tolist()
        if DET_CLASSES[cat] == 'rectangle':
            cv2.rectangle(img, (int(x), int(y)), (int(x + w), int(y + h)),
                          color, -1)
        else:
            w = h = min(w, h)
            cv2.circle(img, (int(x + w // 2), int(y + h // 2)), int(w // 2),
                       color, -1)
        objects.append(([float(x), float(y), float(w), float(h)], cat))
    return img, objects


def make_det_set(root, rng, num_train=48, num_val=16):
    os.makedirs(osp.join(root, 'images'), exist_ok=True)
    os.makedirs(osp.join(root, 'annotations'), exist_ok=True)
    categories = [dict(id=i + 1, name=n) for i, n in enumerate(DET_CLASSES)]
    image_id = ann_id = 0
    for split, num in (('train', num_train), ('val', num_val)):
        images, annotations = [], []
        for _ in range(num):
            image_id += 1
            img, objects = make_det_image(rng)
            name = f'{split}_{image_id:04d}.png'
            cv2.imwrite(osp.join(root, 'images', name), img)
            images.append(dict(id=image_id, file_name=name,
                               height=img.shape[0], width=img.shape[1]))
            for bbox, cat in objects:
                ann_id += 1
                annotations.append(dict(
                    id=ann_id, image_id=image_id, category_id=cat + 1,
                    bbox=bbox, area=bbox[2] * bbox[3], iscrowd=0))
        with open(osp.join(root, 'annotations', f'{split}.json'), 'w') as f:
            json.dump(dict(images=images, annotations=annotations,
                           categories=categories), f)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--out', default='data/demo',
                        help='output folder (default: %(default)s)')
    parser.add_argument('--seed', type=int, default=0,
                        help='seed of the data (default: %(default)s)')
    parser.add_argument('--only', choices=['video', 'det'],
                        help='write one of the two sets (default: both)')
    parser.add_argument('--det-train', type=int, default=48,
                        help='detection training images '
                        '(default: %(default)s)')
    parser.add_argument('--det-val', type=int, default=16,
                        help='detection validation images '
                        '(default: %(default)s)')
    args = parser.parse_args()
    if min(args.det_train, args.det_val) < 1:
        parser.error('--det-train and --det-val must be >= 1')
    rng = np.random.default_rng(args.seed)
    if args.only in (None, 'video'):
        make_video_set(osp.join(args.out, 'video'), rng)
    if args.only in (None, 'det'):
        make_det_set(osp.join(args.out, 'det'), rng, args.det_train,
                     args.det_val)
    print(f'demo data written to {osp.abspath(args.out)}')


if __name__ == '__main__':
    main()
