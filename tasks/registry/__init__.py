"""Stage 6, from a tested policy to a registered model: MLflow runs, the gate, aliases.

``register`` logs the run, registers the policy bundle as a pyfunc and applies the
champion gate with the ``challenger``, ``champion`` and ``previous_champion`` aliases.
``serving`` is that pyfunc (the same state builder and order rules as training), and
``policy_model`` the models-from-code file MLflow runs to load it. Delivery reads
models only through this part.
"""
