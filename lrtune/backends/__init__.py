"""Inference backends behind one protocol (:class:`lrtune.backends.base.Backend`):
``vllm`` (vLLM engines; ``vllm_patches`` is the one place lrtune changes vLLM internals) and
``hf`` (transformers, lrtune's own batched decode loop)."""
