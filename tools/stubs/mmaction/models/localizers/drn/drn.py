# Stub installed by mmext's tools/setup_env.sh and .dev_scripts/gpu_check.sh
# --bundle (tools/stubs/README.md): the mmaction2 1.2.0 release omits this
# package (open-mmlab/mmaction2#2714).
class DRN:

    def __init__(self, *args, **kwargs):
        raise ImportError('mmaction2 1.2.0 ships without the DRN localizer '
                          '(open-mmlab/mmaction2#2714); install mmaction2 '
                          'from source to use it.')
