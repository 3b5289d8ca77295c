"""PURE health verdicts (SPEC §4, §12, §13, §14): samples and exit facts in, verdicts out.

`monitor.HealthMonitor` judges one run (GPU use, stall, startup); `gpu_news` classifies one GPU
sample, says which sample is news and tracks slowed GPUs; `xid` says what an Xid needs; `ranks`
finds vanished ranks; `causes` says why a run died. Imports: core's top-level modules and
core.progress (the learned stall window).
"""
