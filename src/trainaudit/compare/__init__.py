"""Golden-value and run-vs-run comparison: Megatron-LM's gate reproduced, explained, judged."""
