"""Runs that are still being written: the diagnose rules evaluated online (``online``) and a
follower for growing logs (``follow``, behind ``trainaudit watch``). No torch here."""
