# The `tailweight` CLI (cli/; `make native` builds it). `make install-cli` installs it into
# $(PREFIX)/bin together with the name kubectl looks for plugins by, so that
# `kubectl tailweight endpoints ...` runs it too.
.PHONY: install-cli
PREFIX ?= $(HOME)/.local

install-cli:
	$(CARGO) build --locked --release -p tailweight-cli
	install -D -m 0755 target/release/tailweight $(PREFIX)/bin/tailweight
	ln -sf tailweight $(PREFIX)/bin/kubectl-tailweight
