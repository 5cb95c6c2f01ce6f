import os

# No model or dataset hub in tests (CI has none); vLLM runs in-process on a CPU.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
if not os.path.exists("/dev/nvidiactl"):  # on a GPU lrtune gives each engine its own process (vllm_platform A)
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Tiny models: one OpenMP thread, unbound (several threads thrash on a shared 2-core box).
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
