"""Test with the ``tools/test.py`` of the config's toolbox, mmext loaded
(what mmext adds: ``tools/train.py``)."""
from train import main

if __name__ == '__main__':
    main('test', one_line_refusals=True)
