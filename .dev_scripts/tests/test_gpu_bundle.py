""".dev_scripts/gpu_bundle.sh: what the bundle must carry, its manifest, the stubs.

No network: the manifest logic runs on the committed package lists and on
fake wheel files; a bundle made by .dev_scripts/gpu_bundle.sh is checked only if
one is there, and the CPU proof only where its environment is named.
"""
import importlib
import importlib.metadata
import json
import os
import os.path as osp
import re
import subprocess
import sys
import warnings

import pytest
from helpers import REPO_ROOT, run_tool

import gpu_bundle

BUNDLE = osp.join(REPO_ROOT, '.gpu_bundle')
PROOF_ENV = os.environ.get('MMEXT_GPU_PROOF_ENV')


def probe():
    """Print, as JSON, ``{module: [distributions]}`` of each third-party
    top-level module that the check's modules and collecting ``tests/``
    import (:func:`_imported_distributions` runs it)."""
    warnings.simplefilter('ignore')
    for module in gpu_bundle.check_modules():
        importlib.import_module(module)
    with open(os.devnull, 'w') as devnull:
        stdout, sys.stdout = sys.stdout, devnull
        try:
            code = pytest.main(['--collect-only', '-q', '-p',
                                'no:cacheprovider',
                                osp.join(REPO_ROOT, 'tests')])
        finally:
            sys.stdout = stdout
    if code != 0:
        raise SystemExit(f'collecting the tests failed ({code})')
    distributions = importlib.metadata.packages_distributions()
    result = {}
    for name in sorted({m.split('.')[0] for m in sys.modules} -
                       set(sys.stdlib_module_names)):
        path = getattr(sys.modules.get(name), '__file__', None)
        dists = distributions.get(name, [])
        if name.startswith('_') or not path or (
                not dists and path.startswith(REPO_ROOT + os.sep)):
            continue  # private, built in, or the checkout's own (tests/)
        # A copy a package vendors (setuptools' jaraco, ...) comes with it.
        vendored = re.search(r'[\\/](\w+)[\\/]_vendor[\\/]', path)
        result[name] = [vendored.group(1)] if vendored else dists
    print(json.dumps(result))


def _imported_distributions():
    """:func:`probe`'s result, in a fresh interpreter of this stack."""
    path = [REPO_ROOT, osp.join(REPO_ROOT, 'tests'), osp.dirname(__file__),
            osp.dirname(osp.dirname(osp.abspath(__file__)))]
    proc = run_tool(
        [sys.executable, '-c', 'import test_gpu_bundle as t; t.probe()'],
        timeout=600, env=dict(PYTHONPATH=os.pathsep.join(path)))
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_every_import_of_the_check_is_on_the_gpu_machine_or_in_the_bundle():
    imported = _imported_distributions()
    needs = set(gpu_bundle.needs())
    # The probe sees what the check imports: the stack, its tests' needs.
    assert {'mmdet', 'mmcv', 'mmaction', 'mmseg', 'mmext', 'pytest',
            'decord', 'pycocotools', 'pkg_resources'} <= set(imported)
    unlisted = {
        module: dists for module, dists in imported.items()
        if not {gpu_bundle.canonical(d) for d in dists} & needs
    }
    assert unlisted == {}, (
        'imported by the check but not in .dev_scripts/requirements/gpu_check_needs.txt')
    sources = gpu_bundle.sources(needs, gpu_bundle.machine_packages(),
                                 [*gpu_bundle.read_pins(), 'mmext'])
    assert [name for name, s in sources.items() if s == 'missing'] == []
    assert sources['numpy'] == sources['torch'] == 'machine'
    assert sources['opencv-python'] == 'machine'  # the headless build
    assert sources['mmcv'] == sources['mmext'] == 'bundle'


def test_the_bundle_carries_only_what_the_machine_lacks():
    pins = gpu_bundle.read_pins()
    machine = gpu_bundle.machine_packages()
    # setuptools only for its version: < 81 still has pkg_resources.
    assert {name for name in pins if name in machine} == {'setuptools'}
    assert pins['setuptools'].split('.')[0] == '80'
    assert {'torch', 'numpy', 'opencv-python-headless', 'pytest',
            'setuptools'} <= machine
    # The exact stack of requirements/stack.txt.
    stack = dict(line.split('==') for line in gpu_bundle.read_list(
        osp.join(REPO_ROOT, 'requirements', 'stack.txt')))
    for name in ('mmengine', 'mmcv', 'mmdet', 'mmaction2', 'mmsegmentation',
                 'decord'):
        assert pins[name] == stack[name]
    assert gpu_bundle.SDISTS == ('mmcv', )
    # Nothing the check does not import.
    assert set(pins) <= set(gpu_bundle.needs())


def test_sources_say_where_each_distribution_comes_from():
    sources = gpu_bundle.sources(
        ['numpy', 'opencv-python', 'setuptools', 'mmdet', 'nope'],
        machine={'numpy', 'opencv-python-headless', 'setuptools'},
        bundled=['mmdet', 'SetupTools'])
    assert sources == {
        'numpy': 'machine', 'opencv-python': 'machine',
        'setuptools': 'bundle', 'mmdet': 'bundle', 'nope': 'missing'
    }


@pytest.mark.parametrize('filename,dist', [
    ('importlib_metadata-10.2.0-py3-none-any.whl',
     ('importlib-metadata', '10.2.0')),
    ('shapely-2.2.0-cp312-cp312-manylinux_2_24_x86_64.whl',
     ('shapely', '2.2.0')),
    ('mmcv-2.1.0.tar.gz', ('mmcv', '2.1.0')),
])
def test_dist_of_file(filename, dist):
    assert gpu_bundle.dist_of_file(filename) == dist


def _fake_bundle(out, pins):
    """Files named as pip saves the pins, with a few bytes each."""
    for name, version in pins.items():
        folder = 'sdist' if name in gpu_bundle.SDISTS else 'wheels'
        os.makedirs(out / folder, exist_ok=True)
        suffix = ('.tar.gz' if folder == 'sdist' else '-py3-none-any.whl')
        (out / folder / f'{name.replace("-", "_")}-{version}{suffix}'
         ).write_bytes(b'x' * 10)
    (out / 'wheels' / 'mmext-0.1.0-py3-none-any.whl').write_bytes(b'x' * 10)
    trees = (gpu_bundle.copy_tree(gpu_bundle.STUBS, str(out)) +
             gpu_bundle.copy_tree(gpu_bundle.OVERRIDES, str(out)))
    return gpu_bundle.write_manifest(str(out), pins, trees, None)


def test_manifest_of_a_bundle_and_what_check_bundle_finds(tmp_path):
    pins = gpu_bundle.read_pins()
    manifest = _fake_bundle(tmp_path, pins)
    assert gpu_bundle.check_bundle(str(tmp_path)) == []
    assert manifest['mmcv_sdist'] == 'sdist/mmcv-2.1.0.tar.gz'
    assert set(manifest['sources']) == set(gpu_bundle.needs())
    assert manifest['sources']['mmengine'] == 'bundle'
    assert manifest['sources']['numpy'] == 'machine'
    assert ('stubs/mmaction/models/localizers/drn/drn.py'
            in manifest['site_files'])
    assert ('overrides/mmaction/models/multimodal/__init__.py'
            in manifest['site_files'])
    assert manifest['bytes'] == 10 * (len(pins) + 1) + sum(
        osp.getsize(tmp_path / p) for p in manifest['site_files'])
    assert manifest['working_tree_bytes'] == gpu_bundle.working_tree_bytes()

    os.remove(tmp_path / 'wheels' / 'decord-0.6.0-py3-none-any.whl')
    manifest['pins']['einops'] = '0.8.2'  # pinned after the download
    manifest['sources']['wcwidth'] = 'missing'
    manifest['limit_bytes'] = 1000
    (tmp_path / 'manifest.json').write_text(json.dumps(manifest))
    problems = gpu_bundle.check_bundle(str(tmp_path))
    assert problems[:2] == ['missing wheels/decord-0.6.0-py3-none-any.whl',
                            'no file for einops==0.8.2']
    assert problems[2] == ('wcwidth is neither on the machine nor in the '
                           'bundle')
    assert problems[3].startswith('bundle and working tree take ')
    assert len(problems) == 4


def test_the_bundle_carries_prebuilt_ops(tmp_path):
    """What a GPU check packed into $OUT goes into prebuilt/, counted and
    named with its stack in the manifest."""
    import mmcv_ops
    so = tmp_path / '_ext.cpython-312-x86_64-linux-gnu.so'
    so.write_bytes(b'\0' * 4096)
    stack = dict(mmcv='2.1.0', python='3.12', torch='2.11.0+cu130')
    mmcv_ops.pack(str(so), stack, str(tmp_path / 'returned'))
    gpu_bundle.copy_prebuilt(str(tmp_path / 'returned'), str(tmp_path / 'b'))
    manifest = _fake_bundle(tmp_path / 'b', gpu_bundle.read_pins())
    assert gpu_bundle.check_bundle(str(tmp_path / 'b')) == []
    assert {k: manifest['prebuilt_ops'][k] for k in stack} == stack
    assert [f['path'] for f in manifest['files'] if f['path'].startswith(
        'prebuilt/')] == ['prebuilt/mmcv-ops.json', 'prebuilt/mmcv-ops.tar.xz']
    assert gpu_bundle.prebuilt_stack(str(tmp_path)) is None


@pytest.mark.skipif(not osp.isfile(osp.join(BUNDLE, 'manifest.json')),
                    reason='no bundle here (make one: .dev_scripts/gpu_bundle.sh)')
def test_the_bundle_made_here_is_complete():
    assert gpu_bundle.check_bundle(BUNDLE) == []
    with open(osp.join(BUNDLE, 'manifest.json')) as f:
        manifest = json.load(f)
    assert manifest['pins'] == gpu_bundle.read_pins(), (
        '.dev_scripts/requirements/gpu_bundle.txt changed: rerun .dev_scripts/gpu_bundle.sh')
    assert manifest['bytes'] + gpu_bundle.working_tree_bytes() < 64 << 20


def test_install_stubs_adds_missing_files_only(tmp_path):
    drn = tmp_path / 'mmaction' / 'models' / 'localizers' / 'drn'
    run_tool(['bash', 'tools/install_stubs.sh', str(tmp_path)])
    assert sorted(os.listdir(drn)) == ['__init__.py', 'drn.py']
    assert 'class DRN' in (drn / 'drn.py').read_text()
    (drn / 'drn.py').write_text('real = True\n')
    run_tool(['bash', 'tools/install_stubs.sh', str(tmp_path)])
    assert (drn / 'drn.py').read_text() == 'real = True\n'


def test_gpu_bundle_help_names_the_proof():
    out = run_tool(['bash', '.dev_scripts/gpu_bundle.sh', '--help']).stdout
    assert out.startswith('Usage: .dev_scripts/gpu_bundle.sh [--out DIR] '
                          '[--prebuilt DIR]\n')
    assert '--proof ENV_DIR' in out and 'set -euo' not in out


@pytest.mark.slow
@pytest.mark.skipif(not PROOF_ENV, reason='the CPU proof environment of '
                    '.dev_scripts/gpu_bundle.sh --proof ENV_DIR is named by '
                    'MMEXT_GPU_PROOF_ENV')
@pytest.mark.skipif(not osp.isfile(osp.join(BUNDLE, 'manifest.json')),
                    reason='no bundle here (make one: .dev_scripts/gpu_bundle.sh)')
def test_bundle_dry_run_in_the_python_312_proof_environment(tmp_path):
    # Not run_tool: it runs the command with this interpreter.
    proc = subprocess.run(
        ['bash', '.dev_scripts/gpu_check.sh', '--bundle', BUNDLE, '--target',
         str(tmp_path / 'site'), '--dry-run'], cwd=REPO_ROOT,
        env=dict(os.environ, PYTHON=osp.join(PROOF_ENV, 'bin', 'python')),
        capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert lines[0].startswith(f'gpu_check: bundle {BUNDLE}: ')
    assert 'modules the check imports load' in lines[0]
    assert lines[-1] == (
        'gpu_check: no CUDA device visible to torch, nothing to run '
        '(dry run OK: 13 lines, configs parse).')
