"""Kernel sources the templates render: each file is a plain, importable Triton module whose
parameters are top-level constants; `render` copies it with the chosen values (template.py)."""
