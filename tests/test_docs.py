"""The docs hold together: links resolve, metafiles list the configs, and the
README's quick starts build as written."""
import ast
import glob
import os.path as osp
import re

import pytest
import yaml
from mmengine.config import Config

import mmext  # noqa: F401  (``mmext::`` prefix)

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
DOCS = ([osp.join(ROOT, 'README.md')] +
        sorted(glob.glob(osp.join(ROOT, 'docs', 'en', '*.md'))) +
        sorted(glob.glob(osp.join(ROOT, 'configs', '*', 'README.md'))))


def _read(path):
    with open(path) as f:
        return f.read()


@pytest.mark.parametrize('doc', DOCS, ids=lambda p: osp.relpath(p, ROOT))
def test_relative_links_resolve(doc):
    links = re.findall(r'\]\(([^)#\s]+)(?:#[^)]*)?\)', _read(doc))
    missing = [
        link for link in links if not link.startswith(('http://', 'https://'))
        and not osp.exists(osp.join(osp.dirname(doc), link))
    ]
    assert missing == []


def _anchors(path):
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to
    hyphens."""
    text = re.sub(r'^```.*?^```', '', _read(path), flags=re.M | re.S)
    headings = re.findall(r'^#+ (.+)$', text, flags=re.M)
    return {re.sub(r'[^\w\- ]', '', h.strip().lower()).replace(' ', '-')
            for h in headings}


@pytest.mark.parametrize('doc', DOCS, ids=lambda p: osp.relpath(p, ROOT))
def test_anchors_resolve(doc):
    links = re.findall(r'\]\(([^)#\s]*\.md|)#([^)\s]+)\)', _read(doc))
    missing = [
        f'{target}#{anchor}' for target, anchor in links
        if anchor not in _anchors(
            osp.join(osp.dirname(doc), target) if target else doc)
    ]
    assert missing == []


def test_metafiles_list_every_config():
    index = yaml.safe_load(_read(osp.join(ROOT, 'model-index.yml')))
    listed = set()
    for meta in index['Import']:
        for model in yaml.safe_load(_read(osp.join(ROOT, meta)))['Models']:
            assert osp.isfile(osp.join(ROOT, model['Config'])), model
            listed.add(model['Config'])
    present = {
        osp.relpath(p, ROOT)
        for folder in ('multigrid', 'agvm')
        for p in glob.glob(osp.join(ROOT, 'configs', folder, '*.py'))
    }
    assert present == listed


def _quick_start(title):
    """The first python block after the README heading ``title``."""
    text = _read(DOCS[0])
    section = text[text.index(f'## {title}'):]
    return re.search(r'```python\n(.*?)```', section, re.S).group(1)


def test_multigrid_quick_start_plans_and_checks(tmp_path):
    from mmengine.registry import MODELS, init_default_scope

    from mmext.multigrid import MultigridPlan
    from mmext.multigrid.checks import check_model
    path = tmp_path / 'mg.py'
    path.write_text(_quick_start('Quick start: multigrid'))
    cfg = Config.fromfile(str(path))
    init_default_scope('mmaction')
    plan = MultigridPlan.from_config(cfg)
    cfg.model.backbone.pretrained = None
    check_model(plan, MODELS.build(cfg.model))
    # Every LR stage runs the whole default long cycle (4 shapes).
    shapes_per_stage = {}
    for stage in plan.stages[:-2]:
        shapes_per_stage.setdefault(stage.lr_stage, set()).add(stage.shape)
    assert all(len(s) == 4 for s in shapes_per_stage.values())


def test_agvm_quick_start_builds_its_wrapper(tmp_path):
    from mmengine.optim import build_optim_wrapper
    from mmengine.registry import MODELS, init_default_scope

    from mmext.agvm import AGVMOptimWrapper
    path = tmp_path / 'agvm.py'
    path.write_text(_quick_start('Quick start: AGVM'))
    cfg = Config.fromfile(str(path))
    init_default_scope('mmdet')
    cfg.model.backbone.init_cfg = None
    model = MODELS.build(cfg.model)
    # Beside an 8-process command: no accumulation (the halves are ranks).
    assert 'accumulative_counts' not in cfg.optim_wrapper
    # Built in this one process, it asks for the override the README gives.
    with pytest.raises(ValueError, match='even accumulative_counts >= 2'):
        build_optim_wrapper(model, cfg.optim_wrapper)
    cfg.merge_from_dict({'optim_wrapper.accumulative_counts': 2})
    wrapper = build_optim_wrapper(model, cfg.optim_wrapper)
    assert isinstance(wrapper, AGVMOptimWrapper)
    assert wrapper.module_names == ['backbone', 'neck', 'rpn_head',
                                    'roi_head']
    assert wrapper.schedule.start_iter == 600


def _public_modules():
    """The mmext modules that declare ``__all__`` (the public API)."""
    names = []
    for path in sorted(glob.glob(osp.join(ROOT, 'mmext', '**', '*.py'),
                                 recursive=True)):
        tree = ast.parse(_read(path))
        if any(isinstance(node, ast.Assign) and any(
                getattr(t, 'id', None) == '__all__' for t in node.targets)
               for node in tree.body):
            module = osp.relpath(path, ROOT)[:-len('.py')].replace(osp.sep, '.')
            names.append(module[:-len('.__init__')]
                         if module.endswith('.__init__') else module)
    return names


def test_api_reference_documents_every_public_module():
    """Each module with an ``__all__`` has its ``automodule`` in
    docs/en/api/, which documents that ``__all__`` (``make docs`` builds it
    with warnings as errors: .ci/run)."""
    pages = ''.join(
        _read(p) for p in glob.glob(osp.join(ROOT, 'docs', 'en', 'api', '*.rst')))
    documented = re.findall(r'^\.\. automodule:: (\S+)$', pages, re.M)
    modules = _public_modules()
    assert 'mmext.multigrid.plan' in modules
    assert sorted(m for m in modules if m not in documented) == []
    assert sorted(m for m in documented if documented.count(m) > 1) == []



def _undocumented(path):
    """The public functions and methods of ``path`` whose docstring lacks
    the Google-style section of their arguments or of their result."""
    found = []

    def visit(node, prefix):
        for child in node.body:
            if child.name.startswith('_') if hasattr(child, 'name') else True:
                continue
            if isinstance(child, ast.ClassDef):
                visit(child, f'{prefix}{child.name}.')
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(child) or ''
                args = [a.arg for a in child.args.posonlyargs +
                        child.args.args + child.args.kwonlyargs
                        if a.arg not in ('self', 'cls')]
                prop = any(getattr(d, 'id', '') == 'property'
                           for d in child.decorator_list)
                returns = any(isinstance(n, ast.Return) and n.value
                              for n in ast.walk(child))
                if (args or child.args.vararg or child.args.kwarg) and (
                        'Args:' not in doc):
                    found.append(f'{prefix}{child.name}: Args')
                if returns and not prop and not (
                        {'Returns:', 'Yields:'} & set(doc.split())):
                    found.append(f'{prefix}{child.name}: Returns')

    visit(ast.parse(_read(path)), '')
    return found


@pytest.mark.parametrize(
    'module', sorted(glob.glob(osp.join(ROOT, 'mmext', '**', '*.py'),
                               recursive=True)),
    ids=lambda p: osp.relpath(p, ROOT))
def test_public_api_documents_its_arguments_and_results(module):
    """Every public function and method says its arguments (``Args:``) and
    its result (``Returns:``/``Yields:``), as mmengine writes them: the
    built API reference shows them (issue 44)."""
    assert _undocumented(module) == []
