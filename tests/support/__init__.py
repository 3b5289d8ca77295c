"""What many test files share (docs/testing.md): no test lives here (tests/test_suite_layout.py).

harness: a real watchdogd under test (Daemon, base_config, merge), wait_until, write_script,
free_port, ROOT, BIN; fakegpu: the state of the NVML stand-in (tests/fake_nvml) and its build,
also a command; fakeclock: a process whose wall clock alone is stepped (tests/fake_clock);
driver: the pure supervisor driven with explicit `now` (Driver, FAST); gpus: the
end-to-end GPU job, config and `gpus` fixture; metrics: scraping and parsing the exposition;
configs: config files parsed from a test's text; scripts: small jobs (sleeper, stepper);
torchrun, frameworks: real torchrun, HF Trainer and Lightning jobs; slurmcluster, etcdcluster:
real outside services on this machine; hungfs: a real hung FUSE mount; jobs/: the job scripts
the end-to-end tests run.
"""
