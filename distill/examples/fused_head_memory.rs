//! Peak resident memory of one language-model head and loss, forward and backward, on the CPU:
//! the whole logits (`naive`), the head and loss in chunks of positions (`chunked`,
//! `distill::train::chunked_loss`, `kd.loss_chunk`), or fused with closed-form gradients (`fused`,
//! `distill::train::objective::fused_head`, `kd.fused_head`). SmolLM2-135M's head by default: hidden
//! states [B, S, H] (a leaf requiring grad, as the body's output), a head weight [V, H] (tied or
//! not, a leaf), the teacher's fp32 logits [B, S, V], next-token labels (the last position of
//! each row -100), 0.5 x forward KL at T = 1 + 0.5 x CE, fp32.
//!
//! Usage: `fused_head_memory MODE [B S H V CHUNK]` (defaults 8 128 576 49152 32). Prints one
//! line: the mode, the loss, and the peak resident set above the inputs in MiB (Linux: the
//! peak is reset through `/proc/self/clear_refs` once the inputs exist, then read from
//! `VmHWM`). Run each mode in its own process.
use distill::train::chunked_loss::chunked_loss;
use distill::train::objective::fused_head::{fused_head_loss, Head};
use distill::train::objective::{LogitKd, Objective};
use tch::{Device, Kind, Tensor};

/// `VmRSS` or `VmHWM` of this process in bytes.
fn status(field: &str) -> u64 {
    let text = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let line = text.lines().find(|l| l.starts_with(field)).unwrap_or_default();
    line.split_whitespace().nth(1).and_then(|kb| kb.parse::<u64>().ok()).unwrap_or(0) * 1024
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = || -> ! {
        eprintln!("usage: fused_head_memory naive|chunked|fused [B S H V CHUNK]");
        std::process::exit(2)
    };
    let mode = args.first().map(String::as_str).unwrap_or_else(|| usage());
    let sizes: Vec<i64> = args[1..].iter().map(|a| a.parse().unwrap_or_else(|_| usage())).collect();
    let [b, s, h, v, chunk] = match sizes.as_slice() {
        [] => [8, 128, 576, 49152, 32],
        &[b, s, h, v, c] => [b, s, h, v, c],
        _ => usage(),
    };
    tch::set_num_threads(2);
    tch::manual_seed(0);
    let opts = (Kind::Float, Device::Cpu);
    let hidden = Tensor::randn([b, s, h], opts).set_requires_grad(true);
    let weight = (Tensor::randn([v, h], opts) * 0.05).set_requires_grad(true);
    let teacher = Tensor::randn([b, s, v], opts) * 2.0;
    let labels = Tensor::randint(v, [b, s], (Kind::Int64, Device::Cpu));
    let _ = labels.narrow(1, s - 1, 1).fill_(-100);
    let kd = LogitKd::forward_kl(1.0, 0.5);
    let before = status("VmRSS:");
    // reset the peak resident set to the current one (Linux 4.0+)
    let reset = std::fs::write("/proc/self/clear_refs", "5").is_ok();
    let loss = match mode {
        "naive" => {
            let logits = hidden.linear::<Tensor>(&weight, None);
            let parts = kd.loss(&logits, Some(&teacher), Some(&labels));
            parts.loss.backward();
            parts.loss.double_value(&[])
        }
        "chunked" => {
            let head = |x: &Tensor| Ok::<_, distill::DistillError>(x.linear::<Tensor>(&weight, None));
            let mut grads = vec![Tensor::new()];
            let c =
                chunked_loss(&kd, &head, &hidden, &labels, Some(&teacher), chunk, 1.0, None, &[&weight], &mut grads)
                    .expect("chunked loss");
            c.loss.loss.double_value(&[])
        }
        "fused" => {
            let head = Head { weight: &weight, bias: None };
            let rows = hidden.flatten(0, 1);
            let (parts, _) =
                fused_head_loss(&rows, head, Some(&teacher.flatten(0, 1)), &labels.reshape([-1]), &kd, b * chunk);
            parts.loss.backward();
            parts.loss.double_value(&[])
        }
        _ => usage(),
    };
    let peak = status("VmHWM:");
    let above = peak.saturating_sub(before) as f64 / (1u64 << 20) as f64;
    println!(
        "{mode} B={b} S={s} H={h} V={v} chunk={chunk} loss={loss:.6} rss_before_MiB={:.1} peak_above_MiB={above:.1}{}",
        before as f64 / (1u64 << 20) as f64,
        if reset { "" } else { " (peak not reset: includes setup)" }
    );
}
