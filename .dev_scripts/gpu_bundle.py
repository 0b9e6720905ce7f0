"""Make the bundle that ``.dev_scripts/gpu_check.sh --bundle`` installs on a bare
GPU machine (run it as ``.dev_scripts/gpu_bundle.sh``).

Writes into ``--out`` (default ``.gpu_bundle/``) the pinned cp312 wheels of
``.dev_scripts/requirements/gpu_bundle.txt`` and mmext's wheel (``wheels/``), the sdists
of :data:`SDISTS` (``sdist/``), ``tools/stubs`` and ``.dev_scripts/overrides``,
Python 3.12's headers if a local Python 3.12 has them, mmcv's prebuilt ops
if any (``prebuilt/``: ``--prebuilt DIR`` copies them there) and
``manifest.json`` (each file's size and sha256; for each distribution the
check imports, ``machine`` or ``bundle``); prints the sizes against the
64 MiB the bundle and the working tree share. What each part is for:
.dev_scripts/README.md, "On a lent GPU machine".
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
PINS = osp.join(ROOT, '.dev_scripts', 'requirements', 'gpu_bundle.txt')
MACHINE = osp.join(ROOT, '.dev_scripts', 'requirements', 'gpu_machine_packages.txt')
NEEDS = osp.join(ROOT, '.dev_scripts', 'requirements', 'gpu_check_needs.txt')
STUBS = osp.join(ROOT, 'tools', 'stubs')
OVERRIDES = osp.join(ROOT, '.dev_scripts', 'overrides')
LIMIT_MIB = 64  # the working tree and the bundle, together
PYTHON_VERSION = '3.12'
# pip matches each manylinux_2_N tag exactly: those the pinned wheels use.
PLATFORMS = ('manylinux_2_28_x86_64', 'manylinux_2_27_x86_64',
             'manylinux_2_24_x86_64', 'manylinux_2_17_x86_64',
             'manylinux2014_x86_64', 'manylinux2010_x86_64',
             'manylinux1_x86_64')
# Pins carried as sdists: mmcv 2.1.0 has no cp312 wheel.
SDISTS = ('mmcv', )
# mmcv's setup.py imports pkg_resources, also while pip reads its metadata.
SDIST_BUILD_CONSTRAINT = 'setuptools<81'
# Needed distributions the machine provides under another name.
PROVIDED_BY = {'opencv-python': 'opencv-python-headless',
               'opencv-contrib-python': 'opencv-python-headless'}
# What the lines import beyond the test modules: what each toolbox's
# register_all_modules imports, mmcv's ops, and pkg_resources (mmengine
# resolves ``pkg::`` configs with it).
CHECK_IMPORTS = (
    'mmext', 'mmcv.ops', 'mmcv.transforms', 'pkg_resources', 'decord',
    'mmdet.datasets', 'mmdet.engine', 'mmdet.evaluation', 'mmdet.models',
    'mmdet.visualization', 'mmaction.datasets', 'mmaction.engine',
    'mmaction.evaluation', 'mmaction.models', 'mmaction.structures',
    'mmaction.visualization', 'mmseg.datasets', 'mmseg.engine',
    'mmseg.evaluation', 'mmseg.models', 'mmseg.structures',
    'mmseg.visualization')


def check_modules() -> List[str]:
    """:data:`CHECK_IMPORTS` and mmext's modules (walking imports them)."""
    import pkgutil
    import warnings

    import mmext
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        return [*CHECK_IMPORTS, *(info.name for info in pkgutil.walk_packages(
            mmext.__path__, 'mmext.'))]


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
    pins = (entry.split('==') for entry in read_list(path))
    return {canonical(name): version.strip() for name, version in pins}


def machine_packages(path: str = MACHINE) -> set:
    return {canonical(name) for name in read_list(path)}


def needs(path: str = NEEDS) -> List[str]:
    """The distributions the check imports, canonical names."""
    return [canonical(entry.split()[0]) for entry in read_list(path)]


def sources(needed: Iterable[str], machine: set,
            bundled: Iterable[str]) -> Dict[str, str]:
    """``{name: 'bundle', 'machine' or 'missing'}`` of each needed
    distribution; the bundle's copy comes first on the GPU machine."""
    bundled = {canonical(name) for name in bundled}
    return {name: 'bundle' if name in bundled else 'machine'
            if PROVIDED_BY.get(name, name) in machine else 'missing'
            for name in needed}


def dist_of_file(filename: str) -> tuple:
    """``(canonical name, version)`` of a wheel or sdist file name."""
    base = osp.basename(filename)
    if base.endswith('.whl'):
        name, version = base.split('-')[:2]
    else:
        name, version = re.sub(r'\.(tar\.gz|zip)$', '', base).rsplit('-', 1)
    return canonical(name), version


def working_tree_files() -> List[str]:
    """What travels to the GPU machine: the files git does not ignore."""
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
    and delete other versions (two of one package stop the install)."""
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
        # The isolated build of the sdist's metadata: pip >= 25.3 reads
        # PIP_BUILD_CONSTRAINT there, older pips PIP_CONSTRAINT.
        env = dict(os.environ, PIP_CONSTRAINT=constraint.name,
                   PIP_BUILD_CONSTRAINT=constraint.name)
        _pip('download', '-q', '--no-deps', '--no-binary=:all:', '-d',
             osp.join(out, 'sdist'), *sdists, env=env)
    for path in _bundle_files(out, ('wheels', 'sdist')):
        name, version = dist_of_file(path)
        if pins.get(name) != version and name != 'mmext':
            os.remove(path)


def build_mmext_wheel(out: str) -> str:
    """mmext's wheel, built from a copy of the working tree (in place, the
    build would replace the checkout's ``mmext/.mim`` links by copies)."""
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
    """Pack a local Python 3.12's ``Python.h`` folder; None without one."""
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
    """Copy ``source`` (its README aside) into ``out``; the files copied,
    relative to ``out``."""
    dest = osp.join(out, osp.basename(source))
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(source, dest, ignore=shutil.ignore_patterns('README.md'))
    return sorted(
        osp.relpath(osp.join(d, f), out)
        for d, _, files in os.walk(dest) for f in files)


def copy_prebuilt(source: str, out: str) -> None:
    """Copy the prebuilt mmcv ops that a GPU check wrote to ``$OUT``
    (``mmcv-ops.tar.xz``, ``mmcv-ops.json``) into ``out/prebuilt``."""
    os.makedirs(osp.join(out, 'prebuilt'), exist_ok=True)
    for suffix in ('.tar.xz', '.json'):
        shutil.copy2(osp.join(source, 'mmcv-ops' + suffix),
                     osp.join(out, 'prebuilt'))


def prebuilt_stack(out: str) -> Optional[dict]:
    """The stack the bundle's prebuilt ops were built for; None: none."""
    path = osp.join(out, 'prebuilt', 'mmcv-ops.json')
    if not osp.isfile(path):
        return None
    with open(path) as f:
        return json.load(f)


# ---------------------------------------------------------------- manifest
def _bundle_files(out: str, folders: Iterable[str]) -> List[str]:
    return sorted(path for folder in folders
                  for path in glob.glob(osp.join(out, folder, '*')))


def write_manifest(out: str, pins: Dict[str, str], trees: List[str],
                   headers: Optional[str]) -> dict:
    """Describe the bundle in ``out/manifest.json``; the manifest."""
    files = []
    paths = _bundle_files(out, ('wheels', 'sdist', 'prebuilt')) + (
        [headers] if headers else [])
    for path in paths:
        name, version = (dist_of_file(path) if '/wheels/' in path
                         or '/sdist/' in path else (None, None))
        with open(path, 'rb') as f:
            sha256 = hashlib.file_digest(f, 'sha256').hexdigest()
        files.append(dict(path=osp.relpath(path, out), distribution=name,
                          version=version, bytes=osp.getsize(path),
                          sha256=sha256))
    bundled = [f['distribution'] for f in files if f['distribution']]
    sdists = [f['path'] for f in files if f['path'].startswith('sdist/')]
    manifest = dict(
        python=PYTHON_VERSION, platforms=list(PLATFORMS), files=files,
        sources=sources(needs(), machine_packages(), bundled),
        mmcv_sdist=next(p for p in sdists if 'mmcv-' in p),
        python_include=osp.relpath(headers, out) if headers else None,
        prebuilt_ops=prebuilt_stack(out),
        site_files=trees, pins=pins,
        bytes=sum(f['bytes'] for f in files) + sum(
            osp.getsize(osp.join(out, path)) for path in trees),
        working_tree_bytes=working_tree_bytes(),
        limit_bytes=LIMIT_MIB << 20)
    with open(osp.join(out, 'manifest.json'), 'w') as f:
        json.dump(manifest, f, indent=1)
    return manifest


def check_bundle(out: str) -> List[str]:
    """What is wrong with the bundle in ``out`` (files missing or changed,
    pins without a file, needs met nowhere, too large)."""
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


# -------------------------------------------------------------------- main
def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog='\n'.join(__doc__.splitlines()[2:]))
    parser.add_argument('--out', default=osp.join(ROOT, '.gpu_bundle'),
                        help='the bundle folder (default: .gpu_bundle)')
    parser.add_argument('--prebuilt', metavar='DIR',
                        help='carry the mmcv-ops.tar.xz and .json of DIR '
                        '(what a GPU check wrote to $OUT)')
    args = parser.parse_args(argv)
    out = osp.abspath(args.out)
    if args.prebuilt:
        copy_prebuilt(args.prebuilt, out)
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
    for f in sorted(manifest['files'], key=lambda f: -f['bytes']):
        print(f'  {f["bytes"] / 2**20:7.2f} MiB  {f["path"]}')
    size, tree = manifest['bytes'], manifest['working_tree_bytes']
    print(f'  bundle {size / 2**20:.2f} MiB + working tree '
          f'{tree / 2**20:.2f} MiB = {(size + tree) / 2**20:.2f} MiB of '
          f'{manifest["limit_bytes"] >> 20} MiB')
    problems = check_bundle(out)
    if problems:
        print('gpu_bundle: ' + '\n  '.join(problems))
        return 1
    machine = sum(s == 'machine' for s in manifest['sources'].values())
    prebuilt = manifest['prebuilt_ops']
    print(f'gpu_bundle: OK; the GPU machine provides {machine} of the '
          f'{len(manifest["sources"])} distributions the check imports; '
          + (f'prebuilt mmcv ops for torch {prebuilt["torch"]}, capability '
             f'{prebuilt["capability"]}.' if prebuilt else
             'no prebuilt mmcv ops (the check builds them).'))
    return 0


if __name__ == '__main__':
    sys.exit(main())
