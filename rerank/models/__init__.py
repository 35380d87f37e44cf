"""Re-rankers, one module each. Each model is declared by a `ModelSpec` (models/base.py) in a light module beside it
(`<family>_spec.py`, no torch), so that listing models and checking options imports no model; adding a model adds
one line here."""

from . import bert_spec, ctrn_spec, mdqa_spec, suggest_spec, tk_spec  # noqa: F401  (each registers its specs)
