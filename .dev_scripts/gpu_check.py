"""One-command GPU check of mmext (run it as ``.dev_scripts/gpu_check.sh``).

Runs each line of :data:`LINES` (the CUDA tests, AGVM and multigrid
training on the smoke configs, the CUDA modes of the benchmarks) with a
time limit, all within ``--budget``, prints each line's row as it ends
(also into ``summary.txt`` of the work dir) and exits 1 if a line failed.
Without CUDA, or with ``--dry-run``, it checks its arguments, the tools and
the configs (with ``--bundle`` also the imports) and runs nothing.
``--bundle DIR`` installs the bundle's prebuilt mmcv ops where they fit the
machine, else builds them beside the lines that need neither them
(``needs_ops``) nor an idle machine (``timing``). The lines, the table and
the bundle: .dev_scripts/README.md, "Checking a GPU machine".
"""
import argparse
import json
import math
import os
import os.path as osp
import re
import signal
import subprocess
import sys
import tarfile
import time
import warnings
from typing import Callable, List, NamedTuple, Optional, Sequence

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
AGVM_CONFIG = 'configs/smoke/faster-rcnn_r18_fpn_agvm_demo-det-smoke.py'
MULTIGRID_CONFIG = ('configs/smoke/'
                    'recognizer3d_r18_multigrid_demo-video-smoke.py')
SLOWFAST_CONFIG = ('configs/multigrid/slowfast_r50_multigrid_8xb8-8x8x1-'
                   'steplr-239e_kinetics400-rgb.py')
BUDGET = 8 * 60  # seconds for all lines together
BUNDLE_BUDGET = 570  # the whole --bundle call, in a 10-minute command
OPS_RESERVE = 120  # seconds left when the ops build is stopped
DEMO_DATA = 'data/demo'
NAME_WIDTH = 26  # the longest line name
OUT_LIMIT = 16 << 20  # the largest file that comes back from $OUT


class Line(NamedTuple):
    """One check: ``check(stdout, work_dir)`` of ``command(work_dir)``
    returns the table's detail or raises :class:`CheckFailed`; ``timing``:
    it measures speed, so never beside the ops build."""
    name: str
    what: str
    command: Callable[[str], List[str]]
    check: Callable[[str, str], str]
    timeout: float
    needs_ops: bool = False
    timing: bool = False


class CheckFailed(Exception):
    """A line ran but its result is wrong."""


# ---------------------------------------------------------------- checks
def _check_tests(output: str, work_dir: str) -> str:
    summary = [line for line in output.splitlines() if ' passed' in line]
    if not summary:
        raise CheckFailed('no CUDA test passed')
    return summary[-1].strip().strip('= ')


def _scalars(work_dir: str) -> List[dict]:
    files = sorted(
        osp.join(dirpath, name)
        for dirpath, _, names in os.walk(work_dir) for name in names
        if name == 'scalars.json')
    if not files:
        raise CheckFailed(f'no scalars.json under {work_dir}')
    with open(files[-1]) as f:
        return [json.loads(line) for line in f if line.strip()]


def check_agvm_scalars(output: str, work_dir: str) -> str:
    """Factors logged, re-estimated, finite and moved away from 1."""
    from mmext.agvm import SCALAR_FACTOR, SCALAR_VARIANCE
    records = _scalars(work_dir)
    train = [r for r in records if 'loss' in r]
    estimates = [r for r in records
                 if any(k.startswith(f'{SCALAR_VARIANCE}/') for k in r)]
    if not train:
        raise CheckFailed('no training iteration logged')
    factors = {k: v for k, v in train[-1].items()
               if k.startswith(f'{SCALAR_FACTOR}/')}
    if not factors:
        raise CheckFailed(f'no {SCALAR_FACTOR}/* factor logged')
    if not estimates:
        raise CheckFailed(f'factors never re-estimated (no '
                          f'{SCALAR_VARIANCE}/* logged)')
    values = [v for r in train + estimates for k, v in r.items()
              if k.startswith('agvm_') or k == 'loss']
    if not all(math.isfinite(v) for v in values):
        raise CheckFailed(f'non-finite factor, variance or loss: {values}')
    if all(v == 1.0 for v in factors.values()):
        raise CheckFailed(f'factors never moved from 1: {factors}')
    return f'{len(estimates)} re-estimates, factors ' + ', '.join(
        f'{k.split("/")[-1]} {v:.4f}' for k, v in factors.items())


def check_ranks(output: str, work_dir: str) -> str:
    """``ranks.json`` of :func:`agvm_ranks_worker`: equal finite factors."""
    with open(osp.join(work_dir, 'ranks.json')) as f:
        ranks = json.load(f)
    first = ranks[0]
    if first['num_updates'] < 1:
        raise CheckFailed('factors never re-estimated')
    if not all(math.isfinite(v) for r in ranks for v in r['factors']):
        raise CheckFailed(f'non-finite factors: {ranks}')
    for rank in ranks[1:]:
        for key in ('factors', 'param_sum', 'num_updates'):
            if rank[key] != first[key]:
                raise CheckFailed(f'{key} differ across ranks: '
                                  f'{[r[key] for r in ranks]}')
    if not first['hooked']:
        raise CheckFailed('AGVM did not use its DDP communication hook')
    return (f"{len(ranks)} ranks, {first['backend']}, device "
            f"{first['device']}: identical factors "
            f"{[round(v, 4) for v in first['factors']]}")


def check_multigrid(output: str, work_dir: str) -> str:
    """Two or more grid shapes, precise BN, a checkpoint, finite losses."""
    from mmext.multigrid import (SCALAR_BATCH_SIZE, SCALAR_CLIP_LEN,
                                 SCALAR_CROP_SIZE, SCALAR_PRECISE_BN)
    records = _scalars(work_dir)
    shapes = {(r[SCALAR_BATCH_SIZE], r[SCALAR_CLIP_LEN], r[SCALAR_CROP_SIZE])
              for r in records if SCALAR_CROP_SIZE in r}
    precise = [r[SCALAR_PRECISE_BN] for r in records
               if SCALAR_PRECISE_BN in r]
    if len(shapes) < 2:
        raise CheckFailed(f'expected a shape change, saw {sorted(shapes)}')
    if not any(precise):
        raise CheckFailed('precise BN did not run')
    losses = [r['loss'] for r in records if 'loss' in r]
    if not losses or not all(math.isfinite(v) for v in losses):
        raise CheckFailed(f'losses {losses}')
    if not any(name.endswith('.pth') for name in os.listdir(work_dir)):
        raise CheckFailed('no checkpoint written')
    return (f'{len(shapes)} shapes, precise BN x{len(precise)}, '
            f'{len(losses)} iterations, last loss {losses[-1]:.3f}')


def _last_json(output: str) -> dict:
    """The JSON object a benchmark run with ``--json`` prints last."""
    for line in reversed(output.splitlines()):
        if line.strip().startswith('{'):
            try:
                return json.loads(line)
            except ValueError:
                break
    raise CheckFailed('no JSON result printed (--json)')


def check_overhead(output: str, work_dir: str) -> str:
    """Per setting of ``agvm_overhead.py --json``: time ratio and share."""
    settings = _last_json(output).get('settings') or []
    if not settings:
        raise CheckFailed('no setting measured')
    return ' | '.join(f"{s['setting']}: ratio {s['ratio']:.3f}, share "
                      f"{s['share']:.1%}" for s in settings)


def check_speedup_stack(output: str, work_dir: str) -> str:
    """``multigrid_speedup.py --json``: the options on, the ratio and, with
    ``--compile``, the graphs; a fallback to eager fails the line."""
    result = _last_json(output)
    if 'ratio' not in result:
        raise CheckFailed('no speed-up measured')
    on = [k for k, v in result.get('stack', {}).items() if v]
    detail = (f"{'+'.join(on) or 'plain'}: speed-up {result['speedup']:.2f}x,"
              f" ratio {result['ratio']:.2f} (net of first iterations "
              f"{result['ratio_net_of_first_iters']:.2f})")
    compiled = result['multigrid'].get('compile')
    if compiled is not None:
        if compiled['fell_back']:
            raise CheckFailed(f"multigrid fell back to eager: "
                              f"{'; '.join(compiled['fallbacks'])[:200]}")
        detail += f"; {compiled['graphs']} graphs, no eager fallback"
    return detail


def result_line(pattern: str) -> Callable[[str, str], str]:
    """The check whose detail is the last stdout line matching ``pattern``:
    the tool's result, not a warning printed after it."""
    def check(output: str, work_dir: str) -> str:
        found = [line.strip() for line in output.splitlines()
                 if re.search(pattern, line)]
        if not found:
            raise CheckFailed(f'no result line printed (none matches '
                              f'{pattern!r})')
        return found[-1][:160]
    return check


check_last_line = result_line(r'\S')


# -------------------------------------------------------------- commands
def _python() -> str:
    return os.environ.get('PYTHON', sys.executable)


def _script(script: str, *args: str) -> Callable[[str], List[str]]:
    """The command ``script args --work-dir <the line's work dir>``."""
    return lambda work_dir: [_python(), script, *args, '--work-dir',
                             work_dir]


SPEEDUP = 'tools/benchmark/multigrid_speedup.py'
OVERHEAD = '.dev_scripts/benchmark/agvm_overhead.py'
ACCURACY = '.dev_scripts/benchmark/multigrid_accuracy.py'
SPEEDUP_GPU = (SPEEDUP, '--synthetic', '--device', 'cuda', '--epochs', '1')
SPEEDUP_RESULT = '^speed-up'  # the result lines the tools print
GAP_CLOSED = 'gap closed:'
LARGE_BATCH = '.dev_scripts/benchmark/agvm_large_batch.py'
LARGE_BATCH_GPU = (LARGE_BATCH, '--device', 'cuda', '--jobs', '4', '--k',
                   '32', '--train-images', '2048', '--epochs', '2', '--seeds',
                   '0', '1', '--lrs-lamb', '0.02')
LINES = [
    # The CUDA tests need no compiled mmcv ops: AGVM's numerics run at once.
    Line('cuda-tests', 'pytest -m cuda',
         lambda _: [_python(), '-m', 'pytest', 'tests', '-m', 'cuda', '-q',
                    '-p', 'no:cacheprovider'], _check_tests, 180),
    Line('agvm-fp32', f'tools/train.py {AGVM_CONFIG}',
         _script('tools/train.py', AGVM_CONFIG), check_agvm_scalars, 90,
         True),
    Line('agvm-amp', f'tools/train.py {AGVM_CONFIG} --amp',
         _script('tools/train.py', AGVM_CONFIG, '--amp'), check_agvm_scalars,
         90, True),
    Line('agvm-2proc', f'2 processes of {AGVM_CONFIG}',
         _script('.dev_scripts/gpu_check.py', '--agvm-ranks', '2'), check_ranks,
         120, True),
    Line('multigrid', f'tools/train.py {MULTIGRID_CONFIG}',
         _script('tools/train.py', MULTIGRID_CONFIG), check_multigrid, 120),
    Line('agvm-overhead', f'{OVERHEAD} --device cuda',
         lambda _: [_python(), OVERHEAD, '--device',
                    'cuda', '--steps', '20', '--warmup', '2',
                    '--update-interval', '10', '--nprocs', '1', '4',
                    '--json'],
         check_overhead, 150, True, True),
    Line('mg-speedup-gpu', f'{SPEEDUP} --synthetic --device cuda',
         _script(*SPEEDUP_GPU), result_line(SPEEDUP_RESULT), 150,
         timing=True),
    Line('mg-speedup-amp-cl-gpu',
         f'{SPEEDUP} --synthetic --device cuda --amp --channels-last',
         _script(*SPEEDUP_GPU, '--amp', '--channels-last', '--json'),
         check_speedup_stack, 150, timing=True),
    Line('mg-speedup-compile-gpu',
         f'{SPEEDUP} --synthetic --device cuda --compile',
         _script(*SPEEDUP_GPU, '--compile', '--json'), check_speedup_stack,
         240, timing=True),
    Line('mg-project-gpu',
         f'{SPEEDUP} --project --device cuda --amp bfloat16 '
         '--channels-last (SlowFast R50 Kinetics-400 schedule)',
         _script(SPEEDUP, '--project', '--device', 'cuda', '--config',
                 SLOWFAST_CONFIG, '--samples-per-rank', '30055', '--amp',
                 'bfloat16', '--channels-last'),
         result_line('^projected:'), 150, timing=True),
    # The benchmarks' CUDA settings, shortened to their code paths: the
    # protocol's SGD and AdamW blocks at --k 32 (tuning, gate, all arms,
    # parallel jobs) and the time-to-accuracy benchmark on the MSR Action3D
    # clips (its curve at 8 epochs, 2 seeds; MMEXT_DATA_ROOT must hold
    # msr_action3d/).
    Line('agvm-large-batch-gpu',
         f'{LARGE_BATCH} --block sgd --device cuda --k 32',
         _script(*LARGE_BATCH_GPU, '--block', 'sgd', '--gate-repeats', '2',
                 '--lrs-small', '0.16', '--lrs-large', '0.32'),
         result_line(GAP_CLOSED), 150, timing=True),
    Line('agvm-large-batch-adamw-gpu',
         f'{LARGE_BATCH} --block adamw --device cuda --k 32',
         _script(*LARGE_BATCH_GPU, '--block', 'adamw', '--lrs-small-adamw',
                 '0.008', '--lrs-large-adamw', '0.032'),
         result_line(GAP_CLOSED), 150, timing=True),
    Line('mg-accuracy-gpu',
         f'{ACCURACY} --device cuda (MSR clips)',
         _script(ACCURACY, '--device', 'cuda',
                 '--epochs', '8', '--seeds', '0', '1', '--jobs', '4',
                 '--threads', '2', '--work-dir', 'work_dirs/gpu_mg_accuracy',
                 '--cfg-options', 'train_dataloader.num_workers=3'),
         result_line('verdict:'), 300),
]


# ------------------------------------------------------- 2-process worker
def agvm_ranks_worker(rank: int, world_size: int, backend: str,
                      work_dir: str) -> None:
    """Train :data:`AGVM_CONFIG` in DDP (under ``bench_utils.run_processes``)
    and save every rank's factors into ``work_dir/ranks.json``."""
    import torch
    from mmengine.dist import all_gather_object

    from bench_utils import build_runner, load_run_config
    device = (torch.device('cuda', torch.cuda.current_device())
              if torch.cuda.is_available() else torch.device('cpu'))
    os.environ['LOCAL_RANK'] = str(rank)  # as torchrun; mmengine reads it
    cfg = load_run_config(AGVM_CONFIG, work_dir=work_dir)
    cfg.launcher = 'pytorch'
    cfg.model_wrapper_cfg = dict(
        type='MMDistributedDataParallel',
        device_ids=[device.index] if backend == 'nccl' else None,
        broadcast_buffers=False)
    runner = build_runner(cfg)
    runner.train()
    wrapper = runner.optim_wrapper
    result = dict(
        rank=rank, backend=backend, device=str(device),
        factors=wrapper.ema.factors.tolist(),
        num_updates=wrapper.ema.num_updates,
        hooked=wrapper.halves.attach(runner.model),
        param_sum=sum(p.detach().double().sum().item()
                      for p in runner.model.module.parameters()))
    ranks = all_gather_object(result)
    if rank == 0:
        with open(osp.join(work_dir, 'ranks.json'), 'w') as f:
            json.dump(ranks, f)


def run_agvm_ranks(world_size: int, work_dir: str) -> None:
    import torch
    sys.path.insert(1, osp.join(ROOT, 'tools', 'benchmark'))  # bench_utils
    from bench_utils import run_processes
    backend = 'nccl' if torch.cuda.device_count() >= world_size else 'gloo'
    os.makedirs(work_dir, exist_ok=True)
    run_processes(agvm_ranks_worker, world_size, (backend, work_dir),
                  timeout=600, backend=backend)


# ------------------------------------------------------------ the runner
def dry_run(lines: Sequence[Line]) -> List[str]:
    """Check the tools and configs the lines use; return the problems."""
    problems = [f'missing {script}' for script in (
        'tools/train.py', OVERHEAD,
        'tools/make_demo_data.py') if not osp.isfile(osp.join(ROOT, script))]
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')  # the stack's import-time noise
        from mmengine.config import Config

        import mmext  # noqa: F401  (registers the mmext:: config prefix)
        for config in (AGVM_CONFIG, MULTIGRID_CONFIG, SLOWFAST_CONFIG):
            if not osp.isfile(osp.join(ROOT, config)):
                problems.append(f'missing config {config}')
                continue
            try:
                cfg = Config.fromfile(osp.join(ROOT, config))
            except Exception as error:  # any parse error is a finding
                problems.append(f'{config} does not parse: {error}')
                continue
            problems += _config_problems(config, cfg)
    if len({line.name for line in lines}) != len(lines):
        problems.append('duplicate line names')
    return problems


def _config_problems(config: str, cfg) -> List[str]:
    if config == AGVM_CONFIG:
        if cfg.optim_wrapper.get('type') != 'mmext.AGVMOptimWrapper':
            return [f'{config}: optim_wrapper is not mmext.AGVMOptimWrapper']
        if cfg.optim_wrapper.get('update_interval') != 1:
            return [f'{config}: should re-estimate every step']
    if config == MULTIGRID_CONFIG and not any(
            h.get('type') == 'mmext.MultigridHook'
            for h in cfg.get('custom_hooks', [])):
        return [f'{config}: no mmext.MultigridHook']
    return []


def _ensure_demo_data(deadline: float) -> Optional[tuple]:
    """Make the demo data if missing; a FAIL row if that failed."""
    stamp = osp.join(ROOT, DEMO_DATA, '.stamp')
    if osp.exists(stamp):
        return None
    try:
        subprocess.run([_python(), 'tools/make_demo_data.py', '--out',
                        DEMO_DATA], cwd=ROOT, check=True, capture_output=True,
                       timeout=max(deadline - time.monotonic(), 1))
    except (subprocess.SubprocessError, OSError) as error:
        return 'demo-data', 'FAIL', 0.0, str(error)[:160]
    open(stamp, 'w').close()
    return None


def run_line(line: Line, work_root: str, deadline: float) -> tuple:
    """Run one line in its own process group, for at most its limit and the
    time left; return (status, seconds, detail). The detail is the check's
    on stdout (``<line>.log``), stderr goes to ``<line>.err.log``."""
    work_dir = osp.join(work_root, line.name)
    log_path = osp.join(work_root, f'{line.name}.log')
    start = time.monotonic()
    timeout = min(line.timeout, deadline - start)
    if timeout <= 0:
        return 'FAIL', 0.0, 'not run: the budget is used up'
    with open(log_path, 'w') as out, open(log_path[:-4] + '.err.log',
                                          'w') as err:
        proc = subprocess.Popen(line.command(work_dir), cwd=ROOT, stdout=out,
                                stderr=err, env=_env(),
                                start_new_session=True)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # its workers too
            proc.wait()
            proc = None
    seconds = time.monotonic() - start
    with open(log_path, errors='replace') as f:
        output = f.read()
    if proc is None:
        return 'FAIL', seconds, (
            f'stopped at the deadline after {seconds:.0f} s (log {log_path})'
            if timeout < line.timeout else
            f'timed out after {timeout:.0f} s, its limit (log {log_path})')
    if proc.returncode != 0:
        with open(log_path[:-4] + '.err.log', errors='replace') as f:
            tail = (f.read().strip() or output.strip()).splitlines()[-1:]
        return 'FAIL', seconds, (f'exit {proc.returncode}: '
                                 f'{(tail or [""])[0][:120]} (log {log_path})')
    try:
        return 'pass', seconds, line.check(output, work_dir)
    except (CheckFailed, OSError, KeyError, ValueError) as error:
        return 'FAIL', seconds, f'{error} (log {log_path})'


def _env() -> dict:
    """The lines' environment: the checkout first on ``PYTHONPATH`` (the
    harnesses of ``benchmark/`` find the user tools' modules themselves,
    through ``benchmark/tool_modules.py``)."""
    path = [ROOT] + [p for p in [os.environ.get('PYTHONPATH')] if p]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(path))


class Report:
    """The table, a row at a time: printed (flushed) and appended to
    ``path`` as each line ends, so a stopped check keeps its rows."""

    def __init__(self, path: str):
        self.path, self.rows = path, []
        self._write(f'{"line":<{NAME_WIDTH}}  {"result":<6}  {"s":>6}  '
                    f'detail', 'w')

    def _write(self, text: str, mode: str = 'a') -> None:
        print(text, flush=True)
        with open(self.path, mode) as f:
            f.write(text + '\n')

    def __call__(self, name: str, status: str, seconds: float,
                 detail: str) -> None:
        self.rows.append((name, status, seconds, detail))
        self._write(f'{name:<{NAME_WIDTH}}  {status:<6}  {seconds:>6.1f}  '
                    f'{detail}')


# ------------------------------------------------------- environment row
def _cudnn_version(version: Optional[int]) -> str:
    """torch's cuDNN version as x.y.z (91900: 9.19.0, 8906: 8.9.6)."""
    if not version:
        return 'none'
    major, rest = divmod(version, 10000 if version >= 90000 else 1000)
    return f'{major}.{rest // 100}.{rest % 100}'


def _first_line(command: Sequence[str], pattern: str) -> str:
    """The first group of ``pattern`` in ``command``'s output, or n/a."""
    try:
        out = subprocess.run(command, capture_output=True, text=True,
                             timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 'n/a'
    found = re.search(pattern, out)
    return found.group(1) if found else 'n/a'


def environment() -> str:
    """The table's first row: python, torch, CUDA, cuDNN, NCCL, the GPUs,
    the driver and nvcc."""
    import platform

    import torch
    parts = [f'python {platform.python_version()}',
             f'torch {torch.__version__}', f'CUDA {torch.version.cuda}',
             f'cuDNN {_cudnn_version(torch.backends.cudnn.version())}']
    try:
        parts.append('NCCL ' + '.'.join(map(str, torch.cuda.nccl.version())))
    except (AttributeError, RuntimeError):  # torch built without NCCL
        parts.append('NCCL none')
    if torch.cuda.is_available():
        gpus = [f'{torch.cuda.get_device_name(i)} (capability '
                f'{".".join(map(str, torch.cuda.get_device_capability(i)))})'
                for i in range(torch.cuda.device_count())]
        parts += [f'{gpus.count(gpu)}x {gpu}' for gpu in sorted(set(gpus))]
    parts.append('driver ' + _first_line(
        ['nvidia-smi', '--query-gpu=driver_version', '--format=csv,noheader'],
        r'(\S+)'))
    parts.append('nvcc ' + _first_line(['nvcc', '--version'],
                                       r'release ([\d.]+)'))
    return ', '.join(parts)


# --------------------------------------------------------- --bundle runs
def _manifest(bundle: str) -> dict:
    with open(osp.join(bundle, 'manifest.json')) as f:
        return json.load(f)


def import_report(modules: Sequence[str],
                  deadline: Optional[float] = None) -> dict:
    """``{module: error}`` of importing each module in a fresh interpreter
    of the lines (``''``: it imports), by ``deadline`` (monotonic)."""
    code = ('import importlib, json, sys, warnings\n'
            'warnings.simplefilter("ignore")\n'
            'errors = {}\n'
            'for name in sys.argv[1:]:\n'
            '    try:\n'
            '        importlib.import_module(name)\n'
            '        errors[name] = ""\n'
            '    except Exception as error:\n'
            '        errors[name] = f"{type(error).__name__}: {error}"\n'
            'print(json.dumps(errors))\n')
    timeout = 300 if deadline is None else max(deadline - time.monotonic(), 1)
    try:
        proc = subprocess.run([_python(), '-c', code, *modules], cwd=ROOT,
                              capture_output=True, text=True, env=_env(),
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return {name: f'import timed out after {timeout:.0f} s'
                for name in modules}
    if proc.returncode:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-1:] or ['']
        return {name: tail[0] for name in modules}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def check_bundle_imports() -> tuple:
    """Import what the check imports; ``(problems, summary)``: an import
    that fails but for mmcv's missing compiled ops is a problem."""
    from gpu_bundle import check_modules
    errors = import_report(check_modules())
    waiting = [name for name, error in errors.items() if 'mmcv._ext' in error]
    problems = [f'import {name}: {error}' for name, error in errors.items()
                if error and name not in waiting]
    summary = (f'{len(errors) - len(waiting)} of the {len(errors)} modules '
               f'the check imports load')
    if waiting:
        summary += (f', {len(waiting)} wait for mmcv\'s compiled ops: '
                    f'{", ".join(waiting)}')
    return problems, summary


def install_detail(args) -> str:
    """What the install row says about the bundle and its target."""
    manifest = _manifest(args.bundle)
    stamp = osp.join(args.target, '.bundle-manifest.json')
    if osp.getmtime(stamp) < args.started_at:
        return f'reused {args.target} (installed by an earlier call)'
    wheels = [f for f in manifest['files'] if f['path'].startswith('wheels/')]
    return (f'{len(wheels)} wheels + {osp.basename(manifest["mmcv_sdist"])} '
            f'(no compiled ops) into {args.target}')


def _stack(args) -> dict:
    """The machine's stack, as prebuilt ops must match it."""
    import mmcv_ops
    sdist = _manifest(args.bundle)['mmcv_sdist']
    return mmcv_ops.machine_stack(re.search(r'mmcv-(.+)\.tar', sdist)[1])


def prebuilt_differences(args) -> Optional[List[str]]:
    """Where the stack of the bundle's prebuilt ops (``prebuilt/``) differs
    from the machine's (``[]``: they fit; None: the bundle has none)."""
    import mmcv_ops
    path = osp.join(args.bundle, 'prebuilt', mmcv_ops.PREBUILT + '.json')
    if not osp.isfile(path):
        return None
    with open(path) as f:
        return mmcv_ops.stack_differences(json.load(f), _stack(args))


def _no_prebuilt(differences: Optional[List[str]]) -> str:
    return ('no prebuilt ops in the bundle' if differences is None else
            'prebuilt ops for another ' + '; '.join(differences))


def prebuilt_ops(args, deadline: float) -> tuple:
    """Install the bundle's prebuilt ops if built for this machine's stack
    and they load: (their path or None, what happened)."""
    import mmcv_ops
    differences = prebuilt_differences(args)
    if differences != []:
        return None, _no_prebuilt(differences)
    try:
        ext = mmcv_ops.unpack(osp.join(args.bundle, 'prebuilt'), args.target)
    except (OSError, ValueError, KeyError, tarfile.TarError) as error:
        return None, f'prebuilt ops unusable: {error}'
    error = import_report(['mmcv.ops'], deadline)['mmcv.ops']
    if error:
        os.remove(ext)
        return None, f'prebuilt ops do not load: {error[:120]}'
    return ext, f'prebuilt for this stack, installed: {ext}'


def start_ops(args, work_root: str, deadline: float, report):
    """Make mmcv's compiled ops ready: reuse an earlier call's, install the
    prebuilt ones, or start the build. ``(build, why)``: the running
    :class:`mmcv_ops.OpsBuild` (None when reported ready), and why the op
    lines cannot run (None: they can)."""
    import mmcv_ops
    reused = mmcv_ops.installed_ext(args.target)
    ext, note = (reused, f'reused {reused}') if reused else prebuilt_ops(
        args, deadline)
    if ext is None:
        build = ops_build(args, work_root)
        build.note = note
        build.start()
        return build, None
    error = import_report(['mmcv.ops'], deadline)['mmcv.ops'] if reused \
        else ''
    why = error and f'the built ops do not load: {error[:160]}'
    report('mmcv-ops-build', 'FAIL' if why else 'pass', 0.0, why or note)
    return None, why or None


def finish_ops_build(build, args, deadline: float,
                     build_deadline: float) -> tuple:
    """Wait for ``build`` until ``build_deadline``, install its ops, check
    that they load and, where ``$OUT`` is set, pack them there
    (:func:`mmcv_ops.pack`); the table row and why the op lines cannot run
    (None: they can)."""
    import mmcv_ops
    why = None
    code = build.wait(build_deadline - time.monotonic())
    if code is None:
        build.stop()
        why = f'build not finished after {build.seconds:.0f} s'
        detail = (f"{why}; stopped, {OPS_RESERVE} s before the budget's "
                  f'end (log {build.log_path})')
    elif code != 0:
        why = f'build failed: {build.reason()}'
        detail = f'{why} (log {build.log_path})'
    else:
        ext = build.install()
        detail = f'built ({build.note}) with {build.describe()}: {ext}'
        error = import_report(['mmcv.ops'], deadline)['mmcv.ops']
        if error:
            why = detail = f'the built ops do not load: {error[:160]}'
        elif os.environ.get('OUT'):
            try:  # within half the time the build left the lines
                archive = mmcv_ops.pack(ext, _stack(args), os.environ['OUT'],
                                        (deadline - time.monotonic()) / 2)
            except (OSError, subprocess.SubprocessError) as error:
                return ('mmcv-ops-build', 'FAIL', build.seconds,
                        f'{detail}; not packed into $OUT: {error}'), None
            size = osp.getsize(archive)
            detail += (f'; packed into {archive} ({size / 2**20:.1f} MiB' +
                       (', over the 16 MiB that come back)'
                        if size > OUT_LIMIT else ')'))
    return ('mmcv-ops-build', 'FAIL' if why else 'pass', build.seconds,
            detail), why


def ops_plan(args) -> str:
    """What the ops row will do (the dry run's listing)."""
    import mmcv_ops
    if mmcv_ops.installed_ext(args.target):
        return 'reused (installed by an earlier call)'
    differences = prebuilt_differences(args)
    if differences == []:
        return 'prebuilt, for this stack'
    return (f'build ({_no_prebuilt(differences)}): '
            f'{ops_build(args, osp.abspath(args.work_dir)).describe()}, '
            f'beside the lines that need neither the ops nor an idle machine')


def ops_build(args, work_root: str):
    """The (unstarted) build of mmcv's CUDA ops from the bundle's sdist."""
    import mmcv_ops
    # The bundle's Python headers, used only where python3 lacks its own.
    include = osp.join(args.target, '.python-include', 'include')
    return mmcv_ops.OpsBuild(
        osp.join(args.bundle, _manifest(args.bundle)['mmcv_sdist']),
        args.target, osp.join(work_root, 'mmcv-ops'),
        mmcv_ops.build_env(True, os.cpu_count(),
                           include if osp.isdir(include) else None))


def schedule(lines: Sequence[Line], building: bool) -> tuple:
    """``(beside, after)``: while mmcv's ops build, only the lines that need
    neither them nor an idle machine (``timing``) run; the others after it,
    checks before timings, shortest limit first (the most fit)."""
    if not building:
        return list(lines), []
    waits = [line for line in lines if line.needs_ops or line.timing]
    return ([line for line in lines if line not in waits],
            sorted(waits, key=lambda line: (line.timing, line.timeout)))


def run_lines(lines: Sequence[Line], args, work_root: str, deadline: float,
              report) -> None:
    """Run the lines and ``report`` each row as it ends; with ``--bundle``
    first the install's row and the ops' (:func:`start_ops`): the lines
    that need the ops are skipped with the reason where they are missing."""
    build = why = None
    if args.bundle:
        report('bundle-install', 'pass', args.install_seconds,
               install_detail(args))
        if any(line.needs_ops for line in lines):
            build, why = start_ops(args, work_root, deadline, report)
    beside, after = schedule(lines, build is not None)
    row = _ensure_demo_data(deadline)
    if row:
        report(*row)
    for line in beside + after:
        if build and line is after[0]:
            row, why = finish_ops_build(build, args, deadline,
                                        deadline - OPS_RESERVE)
            report(*row)
        if why and line.needs_ops:
            report(line.name, 'skipped: needs mmcv CUDA ops', 0.0, why)
        else:
            report(line.name, *run_line(line, work_root, deadline))


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog='\n'.join(__doc__.splitlines()[2:]))
    parser.add_argument('--dry-run', action='store_true',
                        help='check arguments, tools and configs only')
    parser.add_argument('--lines', nargs='+', metavar='NAME',
                        choices=[line.name for line in LINES],
                        help='run only these lines (default: all)')
    parser.add_argument('--work-dir', default='work_dirs/gpu_check',
                        help='logs and work dirs of the lines')
    parser.add_argument('--budget', type=float,
                        help=f'seconds for all lines (default: {BUDGET}); '
                        f'with --bundle for the whole call ({BUNDLE_BUDGET})')
    parser.add_argument('--bundle', metavar='DIR',
                        help='the bundle installed into --target: build '
                        'mmcv\'s ops beside the lines')
    parser.add_argument('--target', metavar='DIR',
                        help='where the bundle is installed (with --bundle)')
    parser.add_argument('--started-at', type=float, default=time.time(),
                        help=argparse.SUPPRESS)  # the call's start (epoch)
    parser.add_argument('--agvm-ranks', type=int, metavar='N',
                        help=argparse.SUPPRESS)  # line agvm-2proc
    args = parser.parse_args(argv)
    if args.budget is None:
        args.budget = BUNDLE_BUDGET if args.bundle else BUDGET
    if args.budget <= 0:
        parser.error(f'--budget must be positive, got {args.budget}')
    if bool(args.bundle) != bool(args.target):
        parser.error('--bundle and --target go together '
                     '(.dev_scripts/gpu_check.sh --bundle DIR passes both)')
    args.install_seconds = time.time() - args.started_at
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.agvm_ranks:
        run_agvm_ranks(args.agvm_ranks, osp.abspath(args.work_dir))
        return 0
    lines = [line for line in LINES
             if not args.lines or line.name in args.lines]
    problems = dry_run(lines)
    import torch
    cuda = torch.cuda.is_available()
    if args.bundle and not problems and (args.dry_run or not cuda):
        problems, summary = check_bundle_imports()
        print(f'gpu_check: bundle {args.bundle}: {install_detail(args)}, '
              f'{args.install_seconds:.1f} s; {summary}.')
    if problems:
        print('gpu_check: dry run failed:\n  ' + '\n  '.join(problems))
        return 2
    if not cuda:
        print(f'gpu_check: no CUDA device visible to torch, nothing to run '
              f'(dry run OK: {len(lines)} lines, configs parse).')
        return 0
    if args.dry_run:
        print(f'gpu_check: dry run OK; would run on '
              f'{torch.cuda.device_count()} GPU(s):')
        for line in lines:
            after = ' (after an mmcv ops build)' if args.bundle and (
                line.needs_ops or line.timing) else ''
            print(f'  {line.name:<{NAME_WIDTH}} {line.what}{after}')
        if args.bundle:
            print(f'  {"mmcv-ops-build":<{NAME_WIDTH}} ' + ops_plan(args))
        return 0
    work_root = osp.abspath(args.work_dir)
    os.makedirs(work_root, exist_ok=True)
    # With --bundle the install, before this process, counts too.
    deadline = time.monotonic() + args.budget - args.install_seconds
    report = Report(osp.join(work_root, 'summary.txt'))
    report('environment', 'info', 0.0, environment())
    run_lines(lines, args, work_root, deadline, report)
    failed = [row[0] for row in report.rows if row[1] == 'FAIL']
    print(f'gpu_check: {len(failed)} of {len(report.rows)} rows failed; '
          f'the table is in {report.path}')
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
