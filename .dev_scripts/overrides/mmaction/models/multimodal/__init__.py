# Copyright (c) OpenMMLab. All rights reserved.
# Replaces mmaction2 1.2.0's mmaction/models/multimodal/__init__.py in the
# GPU check's bundle install (.dev_scripts/overrides/README.md). With transformers
# >= 5 installed, as on the GPU machine, the original imports the VindLU
# models, which import names that transformers 5 removed, and
# `import mmaction.models` fails. Register the placeholders that the
# original registers without transformers (VindLU is irrelevant to mmext).
from mmaction.registry import MODELS
from mmaction.utils.dependency import register_multimodal_placeholder

register_multimodal_placeholder(
    ['VindLUVQA', 'VindLURetrievalMC', 'VindLURetrieval'], MODELS)
