"""kiln: PyTorch models baked into bare-metal Cortex-M + Ethos-U firmware."""

import logging
import re


class _TorchaoImportNotices(logging.Filter):
    """Drops the notices that importing torchao 0.18 logs on torch's CPU wheel, which no
    kiln user can act on, and nothing else:
    - logger "torchao": "Failed to load .../torchao/_C_mxfp8...so: ..." for each CUDA-only
      library in torchao's wheel (torchao/__init__.py tries them all);
    - logger "torch.utils._pytree": "<enum 'KernelPreference'> is an Enum subclass and is now
      natively supported by torch.compile ...", torch 2.13 deprecating the pytree
      registration torchao still makes for its enums (named by their module, torchao.*).
    Installed here, where every kiln import starts, before anything of kiln imports torchao."""

    _LIBRARY = re.compile(r"Failed to load \S*/torchao/_C\w*\S*\.so: ")
    _ENUM = "%s is an Enum subclass and is now natively supported by torch.compile"

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == "torchao":
            return not (isinstance(record.msg, str) and self._LIBRARY.match(record.msg))
        args = record.args if isinstance(record.args, tuple) else ()
        registered = args[0] if args else None
        return not (
            isinstance(record.msg, str)
            and record.msg.startswith(self._ENUM)
            and getattr(registered, "__module__", "").startswith("torchao.")
        )


for _logger in ("torchao", "torch.utils._pytree"):
    logging.getLogger(_logger).addFilter(_TorchaoImportNotices())
