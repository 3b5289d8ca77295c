"""Tests of the systemd unit, the journal fields and `make install` under a real systemd."""
