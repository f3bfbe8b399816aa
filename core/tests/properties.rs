//! Properties every config must satisfy: peaks grow with the model and the batch, no input
//! panics, and everything round-trips through JSON.

use proptest::prelude::*;
use vramfit_core::plan::{plan, PlanRequest};
use vramfit_core::sim::simulate;
use vramfit_core::{config, device, Attention, Config, Dtype, Optimizer};

fn arb_config() -> impl Strategy<Value = Config> {
    (
        (1u32..6, 1u32..5, 1u32..9, 0usize..4, 1u32..3000),
        (1u32..9, 1u32..4, prop::bool::ANY, prop::bool::ANY, prop::bool::ANY),
        (0usize..3, prop::bool::ANY, prop::bool::ANY, prop::bool::ANY, 0u32..3),
    )
        .prop_map(|((n_layer, n_head, width, block_pow, vocab), (batch, ga, bias, manual, ckpt), (dtype, drop, sgd, xs, eval_b))| {
            Config {
                n_layer,
                n_head,
                n_embd: n_head * 16 * width,
                block_size: 16 << block_pow,
                vocab_size: vocab,
                bias,
                dropout: if drop { 0.1 } else { 0.0 },
                batch_size: batch,
                gradient_accumulation_steps: ga,
                eval_iters: 2,
                eval_batch_size: if eval_b == 0 { None } else { Some(eval_b * 3) },
                eval_block_size: None,
                dtype: Dtype::ALL[dtype],
                attention: if manual { Attention::Manual } else { Attention::Flash },
                compile: false,
                activation_checkpointing: ckpt,
                optimizer: if sgd { Optimizer::Sgd } else { Optimizer::Adamw },
                expandable_segments: xs,
                eval_only: false,
            }
        })
}

fn peaks(cfg: &Config) -> [u64; 4] {
    let s = simulate(cfg, &device::default_gpu().target());
    [s.train.bytes, s.eval.bytes, s.first_iter.bytes, s.eval_at_start.bytes]
}

fn no_smaller(a: [u64; 4], b: [u64; 4]) -> bool {
    a.iter().zip(b.iter()).all(|(x, y)| y >= x)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn peaks_do_not_decrease_with_batch(cfg in arb_config(), extra in 1u32..5) {
        let bigger = Config { batch_size: cfg.batch_size + extra, ..cfg.clone() };
        prop_assert!(no_smaller(peaks(&cfg), peaks(&bigger)));
    }

    #[test]
    fn peaks_do_not_decrease_with_block(cfg in arb_config()) {
        let bigger = Config { block_size: cfg.block_size * 2, ..cfg.clone() };
        prop_assert!(no_smaller(peaks(&cfg), peaks(&bigger)));
    }

    #[test]
    fn peaks_do_not_decrease_with_layers(cfg in arb_config(), extra in 1u32..4) {
        let bigger = Config { n_layer: cfg.n_layer + extra, ..cfg.clone() };
        prop_assert!(no_smaller(peaks(&cfg), peaks(&bigger)));
    }

    #[test]
    fn peaks_do_not_decrease_with_n_embd(cfg in arb_config()) {
        let bigger = Config { n_embd: cfg.n_embd + 16 * cfg.n_head, ..cfg.clone() };
        prop_assert!(no_smaller(peaks(&cfg), peaks(&bigger)));
    }

    #[test]
    fn breakdown_sums_to_peak(cfg in arb_config()) {
        let s = simulate(&cfg, &device::default_gpu().target());
        for p in [&s.train, &s.eval, &s.first_iter, &s.eval_at_start] {
            prop_assert_eq!(p.breakdown.total(), p.bytes);
        }
    }

    #[test]
    fn config_and_plan_round_trip_through_json(cfg in arb_config()) {
        let text = serde_json::to_string(&cfg).unwrap();
        prop_assert_eq!(&serde_json::from_str::<Config>(&text).unwrap(), &cfg);
        let p = plan(&PlanRequest { config: cfg, gpus: vec![], other_usage_bytes: 0, with_fixes: false }).unwrap();
        let text = serde_json::to_string(&p).unwrap();
        prop_assert_eq!(serde_json::from_str::<vramfit_core::Plan>(&text).unwrap(), p);
    }

}

/// A field value: mostly small (so whole configs are often valid and get planned), often at or
/// just past its limit, sometimes anything.
fn edgy(limit: u32) -> impl Strategy<Value = u32> {
    prop_oneof![24 => 1u32..=8, 1 => Just(0), 1 => Just(limit), 1 => Just(limit.saturating_add(1)), 1 => any::<u32>()]
}

fn edgy_dropout() -> impl Strategy<Value = f64> {
    prop_oneof![4 => Just(0.0), 2 => 0.0f64..1.0, 1 => Just(1.0), 1 => Just(-0.0), 1 => Just(f64::NAN), 1 => Just(f64::INFINITY), 1 => any::<f64>()]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Any field values: `plan` answers exactly when validation accepts, never panics, and a
    /// plan it gives is consistent (the reserve holds at least the allocated blocks, the
    /// process at least its reserve).
    #[test]
    fn no_input_panics(
        n_layer in edgy(config::MAX_LAYERS), n_head in edgy(config::MAX_HEADS), n_embd in edgy(config::MAX_EMBD),
        block in edgy(config::MAX_BLOCK), vocab in edgy(config::MAX_VOCAB), batch in edgy(config::MAX_BATCH),
        ga in edgy(config::MAX_ACCUM), eb in prop::option::of(edgy(config::MAX_BATCH)),
        et in prop::option::of(edgy(config::MAX_BLOCK)), dropout in edgy_dropout(), ei in edgy(config::MAX_EVAL_ITERS),
        whole_heads in prop::bool::weighted(0.8),
    ) {
        // Mostly a width that n_head divides, as a real config has.
        let n_embd = if whole_heads { n_head.saturating_mul(n_embd) } else { n_embd };
        let cfg = Config {
            n_layer, n_head, n_embd, block_size: block, vocab_size: vocab, batch_size: batch,
            gradient_accumulation_steps: ga, eval_batch_size: eb, eval_block_size: et, dropout, eval_iters: ei,
            ..Config::default()
        };
        let valid = cfg.validate().is_ok();
        let planned = plan(&PlanRequest { config: cfg, gpus: vec![], other_usage_bytes: 0, with_fixes: false });
        prop_assert_eq!(planned.is_ok(), valid);
        if let Ok(p) = planned {
            for w in [&p.train, &p.eval, &p.first_iter, &p.eval_at_start] {
                prop_assert!(w.peak_reserved_bytes >= w.peak_allocated_bytes);
                prop_assert!(w.nvidia_smi_bytes >= w.peak_reserved_bytes);
            }
        }
    }
}

/// Validated-but-huge configs (the overflow guard's edge) simulate without overflow.
#[test]
fn largest_valid_sizes_do_not_overflow() {
    let cfg = Config { n_layer: 64, n_head: 64, n_embd: 8192, block_size: 8192, vocab_size: 1 << 20, batch_size: 64, ..Config::default() };
    cfg.validate().unwrap();
    let p = plan(&PlanRequest { config: cfg, gpus: vec![], other_usage_bytes: 0, with_fixes: true }).unwrap();
    assert!(!p.cards[0].fits);
    assert!(p.train.peak_allocated_bytes > 1 << 40);
}

#[test]
fn validation_messages_are_single_lines() {
    let bad = [
        Config { n_head: 5, ..Config::default() },
        Config { dropout: 1.0, ..Config::default() },
        Config { dropout: f64::NAN, ..Config::default() },
        Config { batch_size: 0, ..Config::default() },
        Config { vocab_size: u32::MAX, ..Config::default() },
        Config { eval_block_size: Some(4096), ..Config::default() },
        Config { n_layer: 1000, n_embd: 65536, n_head: 1, block_size: 1 << 20, batch_size: 65536, ..Config::default() },
    ];
    for cfg in bad {
        let err = cfg.validate().expect_err("invalid");
        let msg = err.to_string();
        assert!(!msg.is_empty() && !msg.contains('\n'), "{msg:?}");
    }
}
