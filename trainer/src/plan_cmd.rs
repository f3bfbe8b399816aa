//! `vramfit plan`: will this run fit, and if not, what to change.

use crate::cli::PlanArgs;
use crate::{inputs, report};
use vramfit_core::device;
use vramfit_core::plan::{self, PlanRequest};

/// Runs `vramfit plan`; returns the text for stdout, or one line saying what was wrong.
pub fn run(args: &PlanArgs) -> Result<String, String> {
    if args.list_gpus {
        let presets = device::presets();
        return if args.json { to_json(&presets) } else { Ok(report::gpu_list(&presets)) };
    }
    let inputs = inputs::resolve(&args.run, &args.card)?;
    for notice in &inputs.notices {
        crate::print_note(notice);
    }
    let request = PlanRequest {
        config: inputs.config.clone(),
        gpus: inputs.gpus.clone(),
        other_usage_bytes: inputs.other_usage_bytes(),
        with_fixes: !args.no_fixes,
    };
    let plan = plan::plan(&request).map_err(|e| e.to_string())?;
    if args.json {
        to_json(&plan)
    } else {
        Ok(report::render(&plan, &inputs, !args.no_fixes))
    }
}

fn to_json<T: serde::Serialize>(value: &T) -> Result<String, String> {
    serde_json::to_string_pretty(value)
        .map(|mut s| {
            s.push('\n');
            s
        })
        .map_err(|e| format!("cannot write JSON: {e}"))
}
