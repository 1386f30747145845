"""The environmental fingerprint (SPEC.md, Environmental fingerprint v0): a point's street
read by a vision-language model from the nearest street photos (``vlm``: the model server's
adapter; ``photos``: which photos, and their bytes in memory only; ``reading``: the question,
its schema and the served figures; ``crosscheck``: the width prior and the seen layer held
against it; ``tools``: the tool)."""
