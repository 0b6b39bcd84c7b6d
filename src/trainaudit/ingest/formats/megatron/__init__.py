"""Megatron-LM iteration logs: the line reader and its grammar (``lines``, ``grammar``) and the
bulk path over chunks of bytes (``bulk``) that gives the same result on logs whose iteration
lines share one layout."""
