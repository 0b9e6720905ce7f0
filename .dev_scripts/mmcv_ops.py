"""Build mmcv's compiled ops (``mmcv._ext``) from its sdist for an mmcv that
was installed without them (``MMCV_WITH_OPS=0``).

The two installs differ by the extension alone: the build runs
``setup.py build_ext --inplace`` in an unpacked sdist and copies
``mmcv/_ext*.so`` into the installed ``mmcv/``. ``.dev_scripts/gpu_check.sh
--bundle`` runs it beside the lines (:class:`OpsBuild`); alone (the CPU
proof of ``.dev_scripts/gpu_bundle.sh --proof --with-ops`` does)::

    python .dev_scripts/mmcv_ops.py --sdist mmcv-2.1.0.tar.gz --target SITE \
        [--work-dir DIR] [--jobs N] [--cpu]

Its interpreter must import torch and ``pkg_resources`` (setuptools < 81).
Built ops travel as :data:`PREBUILT` (``.tar.xz``, ``.json``): :func:`pack`
writes them, :func:`unpack` installs them where :func:`stack_differences`
finds none.
"""
import argparse
import glob
import hashlib
import json
import os
import os.path as osp
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
from typing import Dict, List, Optional

EXT_GLOB = osp.join('mmcv', '_ext*.so')
PREBUILT = 'mmcv-ops'  # mmcv-ops.tar.xz: the extension; mmcv-ops.json: its stack


def installed_ext(target: str) -> Optional[str]:
    """The compiled ops in ``target/mmcv``, or None."""
    found = glob.glob(osp.join(target, EXT_GLOB))
    return found[0] if found else None


def cuda_arch_list() -> str:
    """``TORCH_CUDA_ARCH_LIST`` of the visible GPUs only, e.g. ``9.0`` (a
    fraction of the compile time of torch's default, every arch)."""
    import torch
    caps = {torch.cuda.get_device_capability(i)
            for i in range(torch.cuda.device_count())}
    return ';'.join(f'{major}.{minor}' for major, minor in sorted(caps))


def build_env(cuda: bool, jobs: int,
              python_include: Optional[str] = None) -> Dict[str, str]:
    """The variables the build adds to the environment: CUDA ops for the
    visible GPUs or CPU ops only, ``jobs`` compile jobs, and
    ``python_include`` (a folder holding ``Python.h``) on ``CPATH`` if this
    interpreter lacks its own."""
    env = {
        'MMCV_WITH_OPS': '1',
        'MAX_JOBS': str(jobs),
        # Python's own flags (CFLAGS replaces them) without debug info
        # (with it, the CPU ops' library is 83 MB instead of 2 MB).
        'CFLAGS': (sysconfig.get_config_var('CFLAGS') or '') + ' -g0',
        # torch builds serially without ninja (the wheel's is in bin/).
        'PATH': osp.dirname(sys.executable) + os.pathsep +
        os.environ.get('PATH', ''),
    }
    if cuda:
        env.update(FORCE_CUDA='1', TORCH_CUDA_ARCH_LIST=cuda_arch_list())
    if python_include and not osp.isfile(
            osp.join(sysconfig.get_paths()['include'], 'Python.h')):
        env['CPATH'] = os.pathsep.join(
            p for p in (python_include, os.environ.get('CPATH')) if p)
    return env


def machine_stack(mmcv: str) -> Dict[str, str]:
    """What compiled ops must match: mmcv's version, python, torch, CUDA,
    cuDNN and the visible GPUs' compute capabilities (e.g. ``9.0``)."""
    import platform

    import torch
    return dict(mmcv=mmcv, python=platform.python_version().rsplit('.', 1)[0],
                torch=torch.__version__, cuda=str(torch.version.cuda),
                cudnn=str(torch.backends.cudnn.version()),
                capability=cuda_arch_list() if torch.cuda.is_available()
                else 'none')


def stack_differences(built_for: Dict[str, str],
                      machine: Dict[str, str]) -> List[str]:
    """Where prebuilt ops' stack differs from the machine's ([]: usable)."""
    return [f'{key} {built_for.get(key)} (machine {value})'
            for key, value in machine.items() if built_for.get(key) != value]


def _sha256(path: str) -> str:
    with open(path, 'rb') as f:
        return hashlib.file_digest(f, 'sha256').hexdigest()


def pack(ext: str, stack: Dict[str, str], out: str,
         timeout: Optional[float] = None) -> str:
    """Write ``out/mmcv-ops.tar.xz`` (``ext`` without debug symbols; xz on
    every core, within ``timeout`` seconds) and ``out/mmcv-ops.json``
    (``stack``, the file's name and sha256); the archive's path."""
    archive = osp.join(out, PREBUILT + '.tar.xz')
    os.makedirs(out, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        so = shutil.copy(ext, tmp)
        if shutil.which('strip'):
            subprocess.run(['strip', '--strip-debug', so],
                           capture_output=True)  # a failure keeps them
        subprocess.run(['tar', '-C', tmp, '-cJf', archive, osp.basename(so)],
                       check=True, timeout=timeout,
                       env=dict(os.environ, XZ_OPT='-T0'))
    with open(osp.join(out, PREBUILT + '.json'), 'w') as f:
        json.dump(dict(stack, file=osp.basename(ext),
                       sha256=_sha256(archive)), f, indent=1)
    return archive


def unpack(folder: str, target: str) -> str:
    """Install the prebuilt ops of ``folder`` into ``target/mmcv``; the
    extension's path. Raises ValueError if the archive is not the one its
    json names."""
    with open(osp.join(folder, PREBUILT + '.json')) as f:
        meta = json.load(f)
    archive = osp.join(folder, PREBUILT + '.tar.xz')
    if _sha256(archive) != meta['sha256']:
        raise ValueError(f'{archive}: sha256 differs from its json')
    name = meta['file']
    dest = osp.join(target, 'mmcv', name)
    with tarfile.open(archive) as tar:
        with tar.extractfile(name) as src, open(dest + '.part', 'wb') as f:
            shutil.copyfileobj(src, f)
    os.replace(dest + '.part', dest)
    return dest


def failure_reason(log_text: str) -> str:
    """The first compiler or Python error of a build log, else its last
    line."""
    lines = [line.strip() for line in log_text.splitlines() if line.strip()]
    for line in lines:
        # Long lines are compiler command lines, which may spell "error".
        if (len(line) < 1000 and re.search(r'\berror:|Error:', line)
                and 'warning' not in line):
            return line[:200]
    return lines[-1][:200] if lines else 'no output'


class OpsBuild:
    """One build of ``mmcv._ext`` from ``sdist`` (the installed mmcv's
    version) in ``work_dir`` (log ``build.log``) into the mmcv installed in
    ``target``, with ``env`` (:func:`build_env`) added to the environment.
    """

    def __init__(self, sdist: str, target: str, work_dir: str,
                 env: Dict[str, str]):
        self.sdist = sdist
        self.target = target
        self.work_dir = work_dir
        self.env = env
        self.log_path = osp.join(work_dir, 'build.log')
        self.source: Optional[str] = None  # the unpacked sdist
        self.proc: Optional[subprocess.Popen] = None
        self.started = self.ended = 0.0

    @property
    def seconds(self) -> float:
        """Wall time of the build so far (or in all, once it ended)."""
        return (self.ended or time.monotonic()) - self.started

    def describe(self) -> str:
        """The build's settings, for the table."""
        keys = ('FORCE_CUDA', 'TORCH_CUDA_ARCH_LIST', 'MAX_JOBS', 'CPATH')
        return ' '.join(f'{k}={self.env[k]}' for k in keys if k in self.env)

    def start(self) -> None:
        """Unpack the sdist; start the build, niced, in its own process
        group."""
        os.makedirs(self.work_dir, exist_ok=True)
        with tarfile.open(self.sdist) as tar:
            top = tar.getnames()[0].split('/')[0]
            tar.extractall(self.work_dir, filter='data')
        self.source = osp.join(self.work_dir, top)
        self.started = time.monotonic()
        with open(self.log_path, 'w') as log:
            self.proc = subprocess.Popen(
                ['nice', '-n', '10', sys.executable, 'setup.py', 'build_ext',
                 '--inplace'], cwd=self.source, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True,
                env=dict(os.environ, **self.env))

    def wait(self, seconds: Optional[float] = None) -> Optional[int]:
        """Wait up to ``seconds`` (None: until it ends); the exit status,
        or None if it still runs."""
        try:
            code = self.proc.wait(
                timeout=None if seconds is None else max(seconds, 0))
        except subprocess.TimeoutExpired:
            return None
        self.ended = self.ended or time.monotonic()
        return code

    def stop(self) -> None:
        """Kill the build and its compiler processes."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.ended = self.ended or time.monotonic()

    def install(self) -> str:
        """Copy the built extension into the installed mmcv; its path."""
        built = installed_ext(self.source)
        if built is None:
            raise FileNotFoundError(f'no {EXT_GLOB} under {self.source}')
        dest = osp.join(self.target, 'mmcv', osp.basename(built))
        # Copy, then rename: an import meanwhile sees no half-written file.
        shutil.copyfile(built, dest + '.part')
        os.replace(dest + '.part', dest)
        return dest

    def reason(self) -> str:
        """Why the build failed, from its log."""
        with open(self.log_path, errors='replace') as f:
            return failure_reason(f.read())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog='\n'.join(__doc__.splitlines()[2:]))
    parser.add_argument('--sdist', required=True, help='mmcv sdist (.tar.gz)')
    parser.add_argument('--target', required=True,
                        help='folder mmcv was installed into without ops')
    parser.add_argument('--work-dir', default='work_dirs/mmcv_ops',
                        help='where the sdist is unpacked and built')
    parser.add_argument('--jobs', type=int, default=os.cpu_count(),
                        help='parallel compile jobs (default: all cores)')
    parser.add_argument('--cpu', action='store_true',
                        help='CPU ops only, even with a GPU')
    args = parser.parse_args(argv)
    import torch
    cuda = not args.cpu and torch.cuda.is_available()
    build = OpsBuild(args.sdist, args.target, osp.abspath(args.work_dir),
                     build_env(cuda, args.jobs))
    print(f'mmcv_ops: building {osp.basename(args.sdist)} '
          f'({"CUDA" if cuda else "CPU"} ops; {build.describe()}) '
          f'against torch {torch.__version__}, log {build.log_path}',
          flush=True)
    build.start()
    if build.wait() != 0:
        print(f'mmcv_ops: build failed after {build.seconds:.0f} s: '
              f'{build.reason()}')
        return 1
    print(f'mmcv_ops: built in {build.seconds:.0f} s: {build.install()}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
