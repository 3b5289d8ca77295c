"""NVML, the one part of the daemon that imports `pynvml`; its errors are translated here.

errors.py (NVML return codes -> our reasons), session.py (the session: what one pass reads,
errors as data, lost access), probe.py (`NvmlProbe`: a pass under a deadline, off the loop;
`EventWatcher`: Xid and the other NVML events on a thread of their own).
"""
