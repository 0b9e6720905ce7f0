"""Sphinx configuration of mmext's docs, as OpenMMLab projects write theirs
(mmengine's docs/en/conf.py): the Markdown pages through myst-parser, the API
reference through autodoc with napoleon reading the Google-style docstrings.

Build from the project root with ``make docs`` (warnings are errors)."""
import importlib.util
import os.path as osp
import sys

ROOT = osp.abspath(osp.join(osp.dirname(__file__), '..', '..'))
sys.path.insert(0, ROOT)

version_file = osp.join(ROOT, 'mmext', 'version.py')
with open(version_file) as f:
    exec(compile(f.read(), version_file, 'exec'))

project = 'mmext'
copyright = '2026, mmext contributors'
author = 'mmext contributors'
release = __version__  # noqa: F821 (defined by version.py)
version = release

extensions = [
    'sphinx.ext.autodoc',
    'sphinx.ext.napoleon',
    'sphinx.ext.viewcode',
    'sphinx_copybutton',
    'myst_parser',
]
source_suffix = {'.rst': 'restructuredtext', '.md': 'markdown'}
root_doc = 'index'
# The run log the study page links to is data, not a page.
exclude_patterns = ['_build', 'Thumbs.db', '.DS_Store', '*.jsonl']

# Markdown: GitHub's heading anchors (the pages link to ``page.md#heading``).
myst_heading_anchors = 4
myst_enable_extensions = ['colon_fence']

# API reference: the members each module lists in ``__all__``, in source
# order, with the signature's type hints shown in the description.
autodoc_default_options = {
    'members': True,
    'member-order': 'bysource',
    'show-inheritance': True,
}
autodoc_typehints = 'description'
# Read the Docs installs torch and mmengine only (requirements/readthedocs.txt):
# mmaction2 needs mmcv's compiled ops. Where it is missing, autodoc mocks it.
autodoc_mock_imports = [
    name for name in ('mmaction', 'mmcv', 'mmdet', 'mmseg')
    if importlib.util.find_spec(name) is None
]
autoclass_content = 'class'
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
# ``Attributes:`` as fields of the class, not as entries beside the members
# autodoc documents (a dataclass's fields would be described twice).
napoleon_use_ivar = True

html_theme = 'sphinx_rtd_theme'
html_title = f'mmext {release}'
copybutton_prompt_text = r'\$ '
copybutton_prompt_is_regexp = True
