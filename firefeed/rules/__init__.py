"""The rule language (SPEC section 3): model, reference evaluator and SQL compiler."""
