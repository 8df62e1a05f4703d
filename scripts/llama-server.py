"""llama-cpp-python's OpenAI-compatible server with weight repacking off, for the real-model
tier (run by the tier's venv Python, with the server's own arguments).

On this machine llama.cpp's extra CPU buffer types (weight repacking, the AMX path on a CPU that
reports AMX) crash the server with a segmentation fault on the first decode of more than one
token; llama-cpp-python's server has no option for `use_extra_bufts`, so it is turned off here
in the model's default parameters before the server starts. Plain matrix code is used instead.
"""

import sys

from llama_cpp import llama_cpp as bindings
from llama_cpp.server.__main__ import main

_default_params = bindings.llama_model_default_params


def _without_repacking():
    params = _default_params()
    params.use_extra_bufts = False
    return params


bindings.llama_model_default_params = _without_repacking  # what `Llama` reads its defaults from

if __name__ == "__main__":
    sys.exit(main())
