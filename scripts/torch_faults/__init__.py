"""Real PyTorch failure incidents for CrashCart, made by ``scripts/make_torch_incidents.py``.

``train.py`` is the tiny job that torchrun launches (it imports torch, so it runs in the torch venv only);
``hooks.py`` holds what a case needs around the run (a port held by someone else, a private tmpfs, a memory
cgroup, a signal from outside); ``cases.py`` is the registry of fault kinds, one entry per case.
"""
