# orca: the whole set-up is `make demo` and `make test` (see README.md).

MUSL := x86_64-unknown-linux-musl
STATIC := target/$(MUSL)/release/orca
# The aarch64 (Graviton) one: cross-compiled (.cargo/config.toml: rust-lld,
# Debian's aarch64-linux-gnu-gcc for ring).
ARM_MUSL := aarch64-unknown-linux-musl
ARM_STATIC := target/$(ARM_MUSL)/release/orca
BUDGET := 3670016

.PHONY: all build release test chaos demo static install docs-gen bench lint fmt clean deps-test deps-demo deps-static

# `make install` puts the binary in $(DESTDIR)$(PREFIX)/bin, the scheduler's
# systemd unit in $(DESTDIR)$(UNITDIR) (where systemd looks: `systemctl enable
# orca-scheduler` then finds it) and its user-data loop in
# $(DESTDIR)$(PREFIX)/share/orca, and the shell completions and man pages
# (`make docs-gen`) under $(DESTDIR)$(PREFIX)/share; BIN is the binary to
# install (by default the static one: run `make static` first, as yourself,
# which writes the completions and man pages too; `sudo make install` then
# builds nothing).
PREFIX ?= /usr/local
UNITDIR ?= /etc/systemd/system
DESTDIR ?=
BIN ?= $(STATIC)
# Where `make docs-gen` writes, and what it runs: examples/gen-docs.rs, clap's
# own generators over src/cli.rs, never linked into the orca binary.
GEN ?= target/gen
GEN_DOCS ?= cargo run --quiet --example gen-docs --

all: build

build:
	cargo build

release:
	cargo build --release

# The whole suite against a real Postgres (scripts/test-db.sh finds or makes one).
# Built once first, then run; the tests mostly wait on processes, so they run
# more at once than there are cores. The aarch64 release binary is built
# first too (3 min from scratch on two busy cores, 1 min after a change to
# orca alone), and ORCA_REQUIRE_ARM64=1 makes
# tests/it/arm64.rs fail rather than skip without it or qemu-aarch64.
test: deps-test
	cargo build --all-targets
	cargo build --release --target $(ARM_MUSL)
	ORCA_REQUIRE_ARM64=1 scripts/test-db.sh cargo test -- --test-threads=6

# Random faults against a mixed workload, judged by a ledger the commands
# write (tests/chaos): `make chaos SEED=42 MINUTES=10`. SEED defaults to a
# random one (printed first; the same seed replays the same faults); MINUTES
# of faults, then the system settles and the checker judges. `make test`
# runs it too, with a fixed seed for about a minute.
SEED ?= random
MINUTES ?= 5
# Then the fleet churn (tests/chaos/churn.rs): CHURN machines made and
# removed under faults (`make test` makes 60).
CHURN ?= 1000
chaos: deps-test
	cargo build --all-targets
	ORCA_CHAOS_SEED=$(SEED) ORCA_CHAOS_SECONDS=$$(awk "BEGIN{print $(MINUTES)*60}") \
		scripts/test-db.sh cargo test --test chaos chaos -- --exact --nocapture
	ORCA_CHAOS_SEED=$(SEED) ORCA_CHAOS_CHURN=$(CHURN) \
		scripts/test-db.sh cargo test --test chaos churn::churn -- --exact --nocapture

# A throwaway Postgres, migrate, register examples/orca.toml, the scheduler
# for about a minute (the pool grows and shrinks), the wind-down, then
# `orca pools` and `orca runs`. Fails unless nothing is left running.
demo: deps-demo release
	scripts/test-db.sh scripts/demo.sh

# The static musl binaries, x86_64 and aarch64: release, opt-level z, LTO,
# stripped, unwind tables dropped, x86_64's relocations packed (a
# static-pie; aarch64's is a plain static executable: .cargo/config.toml);
# each within budget, then copied to
# target/static/orca-ARCH with orca-ARCH.sha256 beside it
# (scripts/static-out.sh). (And the completions and man pages `make install`
# installs.)
static: docs-gen deps-static
	CC_x86_64_unknown_linux_musl=$${CC_x86_64_unknown_linux_musl:-$$(command -v musl-gcc || echo gcc)} \
		cargo build --release --target $(MUSL)
	cargo build --release --target $(ARM_MUSL)
	scripts/static-out.sh x86_64 $(STATIC) $(BUDGET)
	scripts/static-out.sh aarch64 $(ARM_STATIC) $(BUDGET)

install: docs-gen
	@scripts/install.sh "$(BIN)" "$(DESTDIR)" "$(PREFIX)" "$(UNITDIR)" "$(GEN)"

# Shell completions (bash, zsh, fish) and man pages (orca.1, orca-COMMAND.1)
# from the command definitions, under $(GEN); made again only when those
# change, so `sudo make install` after `make static` runs no cargo.
docs-gen: $(GEN)/man/man1/orca.1
$(GEN)/man/man1/orca.1: src/cli.rs examples/gen-docs.rs build.rs Cargo.lock
	$(GEN_DOCS) $(GEN)

# What the tests and the demo need beyond Rust (Postgres, a registry, a
# Python venv, qemu-user; for `make static` the aarch64 cross gcc and rustup's
# musl targets): installed as root with apt-get, or one command to run.
deps-test:
	@scripts/deps.sh test
deps-demo:
	@scripts/deps.sh demo
deps-static:
	@scripts/deps.sh static

# Figures, not pass/fail: tick cost, start rate, memory, binary size, config
# check, pools, warm pool, overlap, the fleet churn (ORCA_BENCH_CHURN machines,
# 1000) (bench/main.rs, a Cargo bench that drives the release binary through
# tests/it/harness). Some sections only:
# scripts/test-db.sh cargo bench --bench bench -- SECTION...
# It measures the static binary, the one that ships (`make static`); ORCA_BIN
# names another.
bench: static
	ORCA_BIN=$${ORCA_BIN:-$(STATIC)} scripts/test-db.sh cargo bench --bench bench

lint:
	cargo fmt --check
	cargo clippy --all-targets -- -D warnings

fmt:
	cargo fmt

clean:
	cargo clean
