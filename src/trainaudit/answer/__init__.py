"""The answer contract: answer.json's schema (docs/answer.md), how an answer is built with
evidence ids, the safe formula evaluator behind every calculation, validation, plot descriptions,
report paths and failure fingerprints. Everything above this layer produces or reads an
:class:`Answer`."""
