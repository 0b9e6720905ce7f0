"""Install mmext. ``pip install -e .`` for development (``make install`` does it)."""
import os
import os.path as osp
import shutil
import sys

from setuptools import find_packages, setup

ROOT = osp.dirname(osp.abspath(__file__))
# What mim-style ``mmext::`` config paths resolve through, as in mmdet/mmaction2.
MIM_FILES = ('configs', 'tools', 'model-index.yml')


def add_mim_extension():
    """Expose configs/ and tools/ as ``mmext/.mim/{configs,tools}``.

    Symlinks in development (editable) installs so edits show through; copies
    when building a wheel or sdist, which cannot carry links.
    """
    building = any(cmd in sys.argv for cmd in ('bdist_wheel', 'sdist', 'build'))
    mim_dir = osp.join(ROOT, 'mmext', '.mim')
    os.makedirs(mim_dir, exist_ok=True)
    for name in MIM_FILES:
        src, dst = osp.join(ROOT, name), osp.join(mim_dir, name)
        if osp.islink(dst) or osp.isfile(dst):
            os.remove(dst)
        elif osp.isdir(dst):
            shutil.rmtree(dst)
        if building:
            (shutil.copytree if osp.isdir(src) else shutil.copyfile)(src, dst)
        else:
            os.symlink(osp.relpath(src, mim_dir), dst)


def read_requirements(name):
    with open(osp.join(ROOT, 'requirements', name)) as f:
        return [line.strip() for line in f
                if line.strip() and not line.startswith('#')]


def get_version():
    scope = {}
    with open(osp.join(ROOT, 'mmext', 'version.py')) as f:
        exec(f.read(), scope)
    return scope['__version__']


if __name__ == '__main__':
    add_mim_extension()
    setup(
        name='mmext',
        version=get_version(),
        description='Multigrid and AGVM training accelerators for '
        'OpenMMLab 2.0 toolboxes',
        long_description=open(osp.join(ROOT, 'README.md')).read(),
        long_description_content_type='text/markdown',
        packages=find_packages(include=['mmext', 'mmext.*']),
        include_package_data=True,
        package_data={
            'mmext': [
                '.mim/configs/**/*', '.mim/tools/**/*', '.mim/model-index.yml'
            ]
        },
        python_requires='>=3.8',
        install_requires=read_requirements('runtime.txt'),
        extras_require={'tests': read_requirements('tests.txt')},
        license='Apache License 2.0',
        zip_safe=False)
