"""What many test files share (docs/testing.md): no test lives here.

harness: a real watchdogd under test (Daemon, base_config, merge), wait_until, write_script, ROOT,
BIN; fakegpu: the state of the NVML stand-in (tests/fake_nvml) and its build; driver: the
pure core driven with explicit `now`; slurmcluster, etcdcluster: real outside services on this
machine; hungfs: a real hung FUSE mount; jobs/: the job scripts the end-to-end tests run.
"""
