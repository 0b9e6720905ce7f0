"""Make the bundle that ``tools/gpu_check.sh --bundle`` installs on a bare
GPU machine (run it as ``tools/gpu_bundle.sh``).

The GPU machine lent to this project has Python 3.12 with torch 2.11 and
the packages of ``requirements/gpu_machine_packages.txt``, no OpenMMLab
stack and no network; only the working tree and the ignored folders a call
names travel to it, 64 MiB in all. The bundle (default ``.gpu_bundle/``,
ignored by git) holds what the check needs beyond the machine's packages:

* ``wheels/``: the cp312 manylinux wheels pinned in
  ``requirements/gpu_bundle.txt``, and mmext's wheel, built from the
  working tree;
* ``sdist/``: the sdists of :data:`SDISTS` (mmcv 2.1.0 has no cp312 wheel;
  ``tools/gpu_check.sh`` installs it without ops, then builds its ops for
  the machine's GPU there);
* ``stubs/`` and ``overrides/``: the import-time stubs of ``tools/stubs/``
  (added where a package lacks a module) and the files of
  ``tools/overrides/`` (replacing one that fails with the machine's
  packages);
* ``python-include.tar.gz``: Python 3.12's C headers, when a Python 3.12
  here has them (``PYTHON312``, else ``python3.12`` on PATH); the ops build
  uses them only if the machine's Python lacks ``Python.h``;
* ``manifest.json``: each file with its size and sha256, and for every
  distribution the check imports (``requirements/gpu_check_needs.txt``)
  where it comes from, ``machine`` or ``bundle``.

Downloads use ``pip download --no-deps``: every dependency the check needs
is named in the pins, and the manifest says which side provides it.
"""
import argparse
import glob
import hashlib
import json
import os
import os.path as osp
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from typing import Dict, Iterable, List, Optional

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
PINS = osp.join(ROOT, 'requirements', 'gpu_bundle.txt')
MACHINE = osp.join(ROOT, 'requirements', 'gpu_machine_packages.txt')
NEEDS = osp.join(ROOT, 'requirements', 'gpu_check_needs.txt')
STUBS = osp.join(ROOT, 'tools', 'stubs')
OVERRIDES = osp.join(ROOT, 'tools', 'overrides')
LIMIT_MIB = 64  # the working tree and the bundle, together
PYTHON_VERSION = '3.12'
# What the machine's pip accepts; pip matches each manylinux_2_N tag
# exactly, so list those the pinned wheels use.
PLATFORMS = ('manylinux_2_28_x86_64', 'manylinux_2_27_x86_64',
             'manylinux_2_24_x86_64', 'manylinux_2_17_x86_64',
             'manylinux2014_x86_64', 'manylinux2010_x86_64',
             'manylinux1_x86_64')
# Pins carried as sdists: no wheel for cp312 (mmcv 2.1.0 has wheels only
# for the torch versions of its release).
SDISTS = ('mmcv', )
# mmcv's setup.py imports pkg_resources, also while pip reads its metadata.
SDIST_BUILD_CONSTRAINT = 'setuptools<81'
# A distribution the check needs that the machine provides under another
# name: its headless OpenCV build provides cv2.
PROVIDED_BY = {
    'opencv-python': 'opencv-python-headless',
    'opencv-contrib-python': 'opencv-python-headless',
}
# The modules the check's lines import beyond the test modules (which
# ``pytest -m cuda`` collects): what each toolbox's register_all_modules
# imports (configs with its default_scope load them), mmcv's ops, and
# pkg_resources (mmengine resolves ``pkg::`` configs with it).
CHECK_IMPORTS = (
    'mmext', 'mmcv.ops', 'mmcv.transforms', 'pkg_resources', 'decord',
    'mmdet.datasets', 'mmdet.engine', 'mmdet.evaluation', 'mmdet.models',
    'mmdet.visualization', 'mmaction.datasets', 'mmaction.engine',
    'mmaction.evaluation', 'mmaction.models', 'mmaction.structures',
    'mmaction.visualization', 'mmseg.datasets', 'mmseg.engine',
    'mmseg.evaluation', 'mmseg.models', 'mmseg.structures',
    'mmseg.visualization')


def canonical(name: str) -> str:
    """A distribution name as pip compares them (PEP 503)."""
    return re.sub(r'[-_.]+', '-', name).lower()


def read_list(path: str) -> List[str]:
    """The entries of a requirements-style file (comments dropped)."""
    with open(path) as f:
        entries = [line.split('#')[0].strip() for line in f]
    return [entry for entry in entries if entry]


def read_pins(path: str = PINS) -> Dict[str, str]:
    """``{canonical name: version}`` of ``name==version`` lines."""
    pins = {}
    for entry in read_list(path):
        name, version = entry.split('==')
        pins[canonical(name)] = version.strip()
    return pins


def machine_packages(path: str = MACHINE) -> set:
    return {canonical(name) for name in read_list(path)}


def needs(path: str = NEEDS) -> List[str]:
    """The distributions the check imports, canonical names."""
    return [canonical(entry.split()[0]) for entry in read_list(path)]


def sources(needed: Iterable[str], machine: set,
            bundled: Iterable[str]) -> Dict[str, str]:
    """Where each needed distribution comes from on the GPU machine.

    ``bundle`` when the bundle carries it (also when the machine has it:
    the bundle's version comes first on the path), else ``machine`` when
    the machine has it or its stand-in (:data:`PROVIDED_BY`), else
    ``missing``.
    """
    bundled = {canonical(name) for name in bundled}
    result = {}
    for name in needed:
        if name in bundled:
            result[name] = 'bundle'
        elif PROVIDED_BY.get(name, name) in machine:
            result[name] = 'machine'
        else:
            result[name] = 'missing'
    return result


def dist_of_file(filename: str) -> tuple:
    """``(canonical name, version)`` of a wheel or sdist file name."""
    base = osp.basename(filename)
    if base.endswith('.whl'):
        name, version = base.split('-')[:2]
    else:
        name, version = re.sub(r'\.(tar\.gz|zip)$', '', base).rsplit('-', 1)
    return canonical(name), version


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, 'rb') as f:
        for block in iter(lambda: f.read(1 << 20), b''):
            digest.update(block)
    return digest.hexdigest()


def working_tree_files() -> List[str]:
    """What travels to the GPU machine besides named folders: the tracked
    files and the untracked ones git does not ignore."""
    out = subprocess.run(
        ['git', 'ls-files', '-z', '--cached', '--others',
         '--exclude-standard'], cwd=ROOT, check=True, capture_output=True,
        text=True).stdout
    return [path for path in out.split('\0')
            if path and osp.isfile(osp.join(ROOT, path))]


def working_tree_bytes() -> int:
    return sum(osp.getsize(osp.join(ROOT, path))
               for path in working_tree_files())


# ---------------------------------------------------------------- download
def _pip(*args: str, env: Optional[dict] = None) -> None:
    subprocess.run([sys.executable, '-m', 'pip', *args,
                    '--disable-pip-version-check'], check=True, env=env)


def download(out: str, pins: Dict[str, str]) -> None:
    """Fetch the pinned wheels and sdists (pip skips files already there)
    and delete any other file in ``wheels/`` and ``sdist/`` (an older pin:
    two versions of one package stop the install)."""
    wheels = [f'{n}=={v}' for n, v in pins.items() if n not in SDISTS]
    sdists = [f'{n}=={v}' for n, v in pins.items() if n in SDISTS]
    platforms = [arg for p in PLATFORMS for arg in ('--platform', p)]
    _pip('download', '-q', '--no-deps', '--only-binary=:all:',
         '--python-version', PYTHON_VERSION, '--implementation', 'cp', '--abi',
         'cp' + PYTHON_VERSION.replace('.', ''), *platforms, '-d',
         osp.join(out, 'wheels'), *wheels)
    with tempfile.NamedTemporaryFile('w', suffix='.txt') as constraint:
        constraint.write(SDIST_BUILD_CONSTRAINT + '\n')
        constraint.flush()
        # pip builds an sdist's metadata in an isolated environment: pin
        # its setuptools (PIP_BUILD_CONSTRAINT for pip >= 25.3, whose
        # PIP_CONSTRAINT no longer reaches that environment).
        env = dict(os.environ, PIP_CONSTRAINT=constraint.name,
                   PIP_BUILD_CONSTRAINT=constraint.name)
        _pip('download', '-q', '--no-deps', '--no-binary=:all:', '-d',
             osp.join(out, 'sdist'), *sdists, env=env)
    for path in _bundle_files(out, ('wheels', 'sdist')):
        name, version = dist_of_file(path)
        if pins.get(name) != version and name != 'mmext':
            os.remove(path)


def build_mmext_wheel(out: str) -> str:
    """mmext's wheel, built from a copy of the working tree (building in
    place would replace the checkout's ``mmext/.mim`` links by copies)."""
    wheels = osp.join(out, 'wheels')
    for old in glob.glob(osp.join(wheels, 'mmext-*.whl')):
        os.remove(old)
    with tempfile.TemporaryDirectory() as tmp:
        for path in working_tree_files():
            os.makedirs(osp.dirname(osp.join(tmp, path)), exist_ok=True)
            shutil.copy2(osp.join(ROOT, path), osp.join(tmp, path))
        _pip('wheel', '-q', '--no-deps', '-w', wheels, tmp)
    return glob.glob(osp.join(wheels, 'mmext-*.whl'))[0]


def python_headers(out: str) -> Optional[str]:
    """Pack Python 3.12's ``Python.h`` folder from a local Python 3.12;
    None (and no file) without one."""
    dest = osp.join(out, 'python-include.tar.gz')
    python = os.environ.get('PYTHON312') or shutil.which(
        f'python{PYTHON_VERSION}')
    include = python and subprocess.run(
        [python, '-c', 'import sysconfig; '
         'print(sysconfig.get_paths()["include"])'],
        capture_output=True, text=True).stdout.strip()
    if not include or not osp.isfile(osp.join(include, 'Python.h')):
        if osp.exists(dest):
            os.remove(dest)
        return None
    with tarfile.open(dest, 'w:gz') as tar:
        tar.add(include, arcname='include')
    return dest


def copy_tree(source: str, out: str) -> List[str]:
    """Copy ``tools/stubs`` or ``tools/overrides`` (its README aside) into
    the bundle folder of the same name; the files, relative to it."""
    dest = osp.join(out, osp.basename(source))
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(source, dest, ignore=shutil.ignore_patterns('README.md'))
    return sorted(
        osp.relpath(osp.join(d, f), out)
        for d, _, files in os.walk(dest) for f in files)


# ---------------------------------------------------------------- manifest
def _bundle_files(out: str, folders: Iterable[str]) -> List[str]:
    return sorted(path for folder in folders
                  for path in glob.glob(osp.join(out, folder, '*')))


def write_manifest(out: str, pins: Dict[str, str], trees: List[str],
                   headers: Optional[str]) -> dict:
    """Describe the bundle in ``out/manifest.json``; the manifest."""
    files = []
    paths = _bundle_files(out, ('wheels', 'sdist')) + (
        [headers] if headers else [])
    for path in paths:
        name, version = (dist_of_file(path) if '/wheels/' in path
                         or '/sdist/' in path else (None, None))
        files.append(dict(path=osp.relpath(path, out), distribution=name,
                          version=version, bytes=osp.getsize(path),
                          sha256=_sha256(path)))
    bundled = [f['distribution'] for f in files if f['distribution']]
    sdists = [f['path'] for f in files if f['path'].startswith('sdist/')]
    manifest = dict(
        python=PYTHON_VERSION, platforms=list(PLATFORMS), files=files,
        sources=sources(needs(), machine_packages(), bundled),
        mmcv_sdist=next(p for p in sdists if 'mmcv-' in p),
        python_include=osp.relpath(headers, out) if headers else None,
        site_files=trees, pins=pins,
        bytes=sum(f['bytes'] for f in files) + sum(
            osp.getsize(osp.join(out, path)) for path in trees),
        working_tree_bytes=working_tree_bytes(),
        limit_bytes=LIMIT_MIB << 20)
    with open(osp.join(out, 'manifest.json'), 'w') as f:
        json.dump(manifest, f, indent=1)
    return manifest


def check_bundle(out: str) -> List[str]:
    """What is wrong with the bundle in ``out``: files missing or changed
    since the manifest, a pin without its file, a needed distribution
    neither on the machine nor in the bundle, or too large together with
    the working tree."""
    with open(osp.join(out, 'manifest.json')) as f:
        manifest = json.load(f)
    problems = []
    for entry in manifest['files']:
        path = osp.join(out, entry['path'])
        if not osp.isfile(path):
            problems.append(f'missing {entry["path"]}')
        elif osp.getsize(path) != entry['bytes']:
            problems.append(f'{entry["path"]} changed since the manifest')
    carried = {(f['distribution'], f['version']) for f in manifest['files']}
    problems += [f'no file for {name}=={version}'
                 for name, version in manifest['pins'].items()
                 if (name, version) not in carried]
    problems += [f'{name} is neither on the machine nor in the bundle'
                 for name, source in manifest['sources'].items()
                 if source == 'missing']
    problems += [f'missing {path}' for path in manifest['site_files']
                 if not osp.isfile(osp.join(out, path))]
    total = manifest['bytes'] + manifest['working_tree_bytes']
    if total > manifest['limit_bytes']:
        problems.append(f'bundle and working tree take {total >> 20} MiB, '
                        f'over {manifest["limit_bytes"] >> 20} MiB')
    return problems


def probe() -> None:
    """Print, as JSON, ``{module: [distributions]}`` of each top-level
    module that :data:`CHECK_IMPORTS`, mmext's modules and the collection
    of ``tests/`` import, but the standard library and the checkout's own
    modules. Run it in a fresh interpreter with the full stack
    (``tests/tools/test_gpu_bundle.py`` compares it with the needs)."""
    import importlib
    import importlib.metadata
    import pkgutil
    import warnings

    import pytest
    warnings.simplefilter('ignore')
    sys.path[:0] = [ROOT, osp.join(ROOT, 'tests')]
    for module in CHECK_IMPORTS:
        importlib.import_module(module)
    import mmext
    for info in pkgutil.walk_packages(mmext.__path__, 'mmext.'):
        importlib.import_module(info.name)
    with open(os.devnull, 'w') as devnull:
        stdout, sys.stdout = sys.stdout, devnull
        try:
            code = pytest.main(['--collect-only', '-q', '-p',
                                'no:cacheprovider', osp.join(ROOT, 'tests')])
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
                not dists and path.startswith(ROOT + os.sep)):
            continue  # private, built in, or the checkout's own (tests/)
        # A copy a package vendors (setuptools' jaraco, ...) comes with it.
        vendored = re.search(r'[\\/](\w+)[\\/]_vendor[\\/]', path)
        result[name] = [vendored.group(1)] if vendored else dists
    print(json.dumps(result))


# -------------------------------------------------------------------- main
def _size_table(manifest: dict) -> List[str]:
    rows = sorted(manifest['files'], key=lambda f: -f['bytes'])
    lines = [f'  {f["bytes"] / 2**20:7.2f} MiB  {f["path"]}' for f in rows]
    tree = manifest['working_tree_bytes']
    total = manifest['bytes'] + tree
    return lines + [
        f'  bundle {manifest["bytes"] / 2**20:.2f} MiB + working tree '
        f'{tree / 2**20:.2f} MiB = {total / 2**20:.2f} MiB of '
        f'{manifest["limit_bytes"] >> 20} MiB']


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog='\n'.join(__doc__.splitlines()[2:]))
    parser.add_argument('--out', default=osp.join(ROOT, '.gpu_bundle'),
                        help='the bundle folder (default: .gpu_bundle)')
    args = parser.parse_args(argv)
    out = osp.abspath(args.out)
    pins = read_pins()
    unmet = [n for n, s in sources(needs(), machine_packages(),
                                   [*pins, 'mmext']).items()
             if s == 'missing']
    if unmet:
        print(f'gpu_bundle: needed but neither on the GPU machine nor '
              f'pinned in {osp.relpath(PINS, ROOT)}: {", ".join(unmet)}')
        return 1
    download(out, pins)
    build_mmext_wheel(out)
    trees = copy_tree(STUBS, out) + copy_tree(OVERRIDES, out)
    manifest = write_manifest(out, pins, trees, python_headers(out))
    print(f'gpu_bundle: {out}')
    print('\n'.join(_size_table(manifest)))
    problems = check_bundle(out)
    if problems:
        print('gpu_bundle: ' + '\n  '.join(problems))
        return 1
    machine = sorted(n for n, s in manifest['sources'].items()
                     if s == 'machine')
    print(f'gpu_bundle: OK; the GPU machine provides {len(machine)} of the '
          f'{len(manifest["sources"])} distributions the check imports.')
    return 0


if __name__ == '__main__':
    sys.exit(main())
