//! `PythonRandom` and the Python generator's scenarios against the `python3` on this machine,
//! bit for bit. These tests need python3 (any CPython 3); without it they fail and say how to
//! install it.

use std::process::Command;

use sluice_core::{NANOS_PER_SEC, Nanos};
use sluice_sim::{Arrival, Generator, PythonRandom, Scenario, TrafficParams};

/// Runs `python3 -c code` and returns its standard output.
fn python(code: &str) -> String {
    let out = match Command::new("python3").arg("-c").arg(code).output() {
        Ok(out) => out,
        Err(e) => panic!(
            "these tests compare with CPython and need `python3` on the PATH ({e}): install it, e.g. \
             `apt-get install -y python3` (Debian, Ubuntu) or `brew install python` (macOS)"
        ),
    };
    assert!(out.status.success(), "python3 failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("python3 prints ASCII")
}

/// Integers, one per whitespace-separated field.
fn numbers(text: &str) -> Vec<u64> {
    text.split_whitespace().map(|n| n.parse().expect("an integer from python3")).collect()
}

/// The Python expression that seeds `r`, and our generator for the same seed.
fn seeds() -> Vec<(&'static str, PythonRandom)> {
    vec![
        ("0", PythonRandom::new(0)),
        ("1", PythonRandom::new(1)),
        ("42", PythonRandom::new(42)),
        ("2**32 + 5", PythonRandom::new((1 << 32) + 5)),
        ("2**64 - 1", PythonRandom::new(u64::MAX)),
        // Negative ints seed as their absolute value.
        ("-42", PythonRandom::new(42)),
        // An int beyond 64 bits, as its 32-bit words from the least significant up.
        ("2**100 + 12345", PythonRandom::from_words(&[12_345, 0, 0, 16])),
        (
            "0x1234567890abcdef1234567890abcdef",
            PythonRandom::from_words(&[0x90ab_cdef, 0x1234_5678, 0x90ab_cdef, 0x1234_5678]),
        ),
    ]
}

/// Python code printing, for seed `seed`, 1 000 `random()` (as the bits of the double, so that
/// the comparison is exact), then 700 `getrandbits(32)`, 20 `getrandbits(40)`, 20 `getrandbits(64)`,
/// `randrange` for a few bounds, and 1 000 `expovariate(6.0)` (bits). 1 000 `random()` take 2 000
/// outputs: three regenerations of the state.
fn draws_script(seed: &str) -> String {
    format!(
        "import random, struct\n\
         bits = lambda x: struct.unpack('<Q', struct.pack('<d', x))[0]\n\
         r = random.Random({seed})\n\
         out = [bits(r.random()) for _ in range(1000)]\n\
         out += [r.getrandbits(32) for _ in range(700)]\n\
         out += [r.getrandbits(40) for _ in range(20)]\n\
         out += [r.getrandbits(64) for _ in range(20)]\n\
         out += [r.randrange(n) for n in [1, 2, 3, 10, 1000, 2**31, 2**32 + 1, 10**15, 2**64 - 1] for _ in range(10)]\n\
         out += [bits(r.expovariate(6.0)) for _ in range(1000)]\n\
         print(*out)\n"
    )
}

fn our_draws(r: &mut PythonRandom) -> Vec<u64> {
    let mut out: Vec<u64> = (0..1000).map(|_| r.random().to_bits()).collect();
    out.extend((0..700).map(|_| r.getrandbits(32)));
    out.extend((0..20).map(|_| r.getrandbits(40)));
    out.extend((0..20).map(|_| r.getrandbits(64)));
    for n in [1, 2, 3, 10, 1000, 1 << 31, (1 << 32) + 1, 1_000_000_000_000_000, u64::MAX] {
        out.extend((0..10).map(|_| r.randbelow(n)));
    }
    out.extend((0..1000).map(|_| r.expovariate(6.0).to_bits()));
    out
}

#[test]
fn draws_match_cpython_bit_for_bit() {
    for (seed, mut ours) in seeds() {
        let theirs = numbers(&python(&draws_script(seed)));
        let ours = our_draws(&mut ours);
        assert_eq!(theirs.len(), ours.len(), "seed {seed}");
        if let Some(i) = (0..ours.len()).find(|&i| ours[i] != theirs[i]) {
            panic!("seed {seed}: draw {i} differs: python {:#x}, ours {:#x}", theirs[i], ours[i]);
        }
    }
}

/// Python code defining `ns(t)`, the nanosecond nearest to the float `t` (halves up), exactly.
const NANOS: &str = "import random, math\n\
                     from fractions import Fraction\n\
                     ns = lambda t: math.floor(Fraction(t) * 10**9 + Fraction(1, 2))\n\
                     def poisson(r, rate, duration):\n    \
                         t, out = 0.0, []\n    \
                         while True:\n        \
                             t += r.expovariate(rate)\n        \
                             if t >= duration:\n            \
                                 return out\n        \
                             out.append(ns(t))\n";

fn times(arrivals: &[Arrival]) -> Vec<Nanos> {
    arrivals.iter().map(|a| a.at).collect()
}

fn generate(scenario: Scenario, f: impl FnOnce(&mut TrafficParams)) -> Vec<Arrival> {
    let mut p = TrafficParams { generator: Generator::Python, ..TrafficParams::default() };
    f(&mut p);
    scenario.generate(&p).unwrap()
}

#[test]
fn the_article_poisson_stream_is_pythons() {
    let theirs = numbers(&python(&format!("{NANOS}print(*poisson(random.Random(42), 6.0, 30.0))")));
    let ours = times(&generate(Scenario::Poisson, |_| {}));
    assert_eq!(ours.len(), 184);
    assert_eq!(ours, theirs);
}

#[test]
fn a_long_poisson_stream_is_pythons_to_the_nanosecond() {
    // 60 000 arrivals: every gap's logarithm must agree with CPython's to the last bit.
    let theirs = numbers(&python(&format!("{NANOS}print(*poisson(random.Random(7), 1000.0, 60.0))")));
    let ours = times(&generate(Scenario::Poisson, |p| (p.seed, p.rps, p.duration) = (7, 1000.0, 60 * NANOS_PER_SEC)));
    assert!(ours.len() > 59_000);
    assert_eq!(ours, theirs);
}

#[test]
fn burst_and_boundary_draw_pythons_randrange() {
    // burst: every 5 s, 30 requests at t0 + randrange(50 ms), sorted.
    let theirs = numbers(&python(
        "import random\nr = random.Random(42)\nout = []\n\
         for k in range(6):\n    out += sorted(k * 5 * 10**9 + r.randrange(50_000_000) for _ in range(30))\n\
         print(*out)",
    ));
    assert_eq!(times(&generate(Scenario::Burst, |_| {})), theirs);

    // boundary: edges at 1, 5, ..., 29 s; 10 before each edge and 10 after, within 100 ms.
    let theirs = numbers(&python(
        "import random\nr = random.Random(42)\nout = []\n\
         for k in range(1, 9):\n    edge = (4 * k - 3) * 10**9\n    \
         before = sorted(edge - 10**8 + r.randrange(10**8) for _ in range(10))\n    \
         after = sorted(edge + r.randrange(10**8) for _ in range(10))\n    out += before + after\n\
         print(*out)",
    ));
    assert_eq!(times(&generate(Scenario::Boundary, |_| {})), theirs);
}

#[test]
fn nat_streams_follow_one_another_from_one_generator() {
    // 20 users one after another from the same random.Random(42), merged by time (stable).
    let theirs = python(&format!(
        "{NANOS}r = random.Random(42)\nout = []\n\
         for i in range(20):\n    out += [(t, i) for t in poisson(r, 6.0, 30.0)]\n\
         out.sort(key=lambda a: a[0])\nprint(*[f'{{t}}:user-{{i}}' for t, i in out])"
    ));
    let ours: Vec<String> = generate(Scenario::Nat, |_| {})
        .iter()
        .map(|a| format!("{}:{}", a.at, a.account.as_deref().unwrap_or("")))
        .collect();
    assert_eq!(ours, theirs.split_whitespace().collect::<Vec<_>>());
}
