//! Our AdamW and SGD (which own their state for exact resume) follow `torch.optim` step for
//! step (AdamW both the default loop and `fused=True`): the same gradients applied for several steps give the same parameters as PyTorch.
use distill::train::optim::Optimizer;
use e2e::python;
use estimator_wasm::schema::{OptimizerKind as Kind_, TrainSpec};
use tch::{Device, Kind, Tensor};

/// Applies 6 steps with a changing learning rate in Rust and in PyTorch; returns max |diff|
/// between the two, and how far PyTorch moved the parameters (max |final - initial|), so that
/// a match cannot come from two optimisers that both did nothing.
fn compare(spec: &TrainSpec, torch_ctor: &str) -> (f64, f64) {
    let dir = tempfile::tempdir().unwrap();
    let _guard = e2e::serial();
    tch::manual_seed(3);
    let weight = Tensor::randn([5, 4], (Kind::Float, Device::Cpu));
    let bias = Tensor::randn([5], (Kind::Float, Device::Cpu));
    weight.write_npy(dir.path().join("w0.npy")).unwrap();
    bias.write_npy(dir.path().join("b0.npy")).unwrap();
    let params = vec![("fc.weight".to_string(), weight.copy()), ("fc.bias".to_string(), bias.copy())];
    let mut opt = Optimizer::new(params, &distill::config::TrainSettings::resolved(spec, 1));
    let lrs = [0.1, 0.05, 0.02, 0.2, 0.01, 0.03];
    for (k, lr) in lrs.iter().enumerate() {
        let gw = Tensor::randn([5, 4], (Kind::Float, Device::Cpu));
        let gb = Tensor::randn([5], (Kind::Float, Device::Cpu));
        gw.write_npy(dir.path().join(format!("gw{k}.npy"))).unwrap();
        gb.write_npy(dir.path().join(format!("gb{k}.npy"))).unwrap();
        // params() is sorted by name: fc.bias, fc.weight.
        opt.step(*lr, &[gb, gw]).unwrap();
    }
    let state: Vec<Tensor> = opt.params().into_iter().map(|t| t.copy()).collect();
    let script = format!(
        "import sys, numpy as np, torch
d = sys.argv[1]
load = lambda n: torch.from_numpy(np.load(f'{{d}}/{{n}}.npy'))
w = load('w0').requires_grad_(); b = load('b0').requires_grad_()
opt = {torch_ctor}
for k, lr in enumerate({lrs:?}):
    for g in opt.param_groups: g['lr'] = lr
    w.grad = load(f'gw{{k}}'); b.grad = load(f'gb{{k}}')
    opt.step()
np.save(f'{{d}}/w.npy', w.detach().numpy()); np.save(f'{{d}}/b.npy', b.detach().numpy())"
    );
    python(&script, &[dir.path().to_str().unwrap()]);
    let w = Tensor::read_npy(dir.path().join("w.npy")).unwrap();
    let b = Tensor::read_npy(dir.path().join("b.npy")).unwrap();
    let dw = (&state[1] - &w).abs().max().double_value(&[]);
    let db = (&state[0] - &b).abs().max().double_value(&[]);
    let moved = (w - weight).abs().max().max_other(&(b - bias).abs().max()).double_value(&[]);
    (dw.max(db), moved)
}

fn spec(optimizer: Kind_, extra: &str) -> TrainSpec {
    let text = format!(
        "[data]\ninput_shape=[4]\nclasses=5\n[student]\nfamily=\"mlp\"\n[train]\noptimizer = \"{}\"\n{extra}",
        match optimizer {
            Kind_::Adamw => "adamw",
            Kind_::Sgd => "sgd",
        }
    );
    estimator_wasm::Config::from_toml_str(&text).unwrap().train
}

#[test]
fn adamw_matches_torch() {
    let s = spec(Kind_::Adamw, "weight_decay = 0.1\nbetas = [0.8, 0.99]\neps = 1e-6");
    let ctor = "torch.optim.AdamW([{'params': [w], 'weight_decay': 0.1}, {'params': [b], 'weight_decay': 0.0}], lr=0.1, betas=(0.8, 0.99), eps=1e-6)";
    let (diff, moved) = compare(&s, ctor);
    assert!(diff < 1e-6, "AdamW differs from torch by {diff}");
    assert!(moved > 0.1, "torch moved the parameters by {moved}");
}

/// Our AdamW calls the kernel of `AdamW(fused=True)`: the same parameters to the last bit.
#[test]
fn adamw_is_torchs_fused_adamw_to_the_bit() {
    let s = spec(Kind_::Adamw, "weight_decay = 0.1\nbetas = [0.8, 0.99]\neps = 1e-6");
    let ctor = "torch.optim.AdamW([{'params': [w], 'weight_decay': 0.1}, {'params': [b], 'weight_decay': 0.0}], lr=0.1, betas=(0.8, 0.99), eps=1e-6, fused=True)";
    let (diff, moved) = compare(&s, ctor);
    assert_eq!(diff, 0.0, "AdamW differs from torch's fused AdamW");
    assert!(moved > 0.1, "torch moved the parameters by {moved}");
}

#[test]
fn sgd_nesterov_momentum_matches_torch() {
    let s = spec(Kind_::Sgd, "weight_decay = 0.01\nmomentum = 0.9\nnesterov = true");
    let ctor = "torch.optim.SGD([{'params': [w], 'weight_decay': 0.01}, {'params': [b], 'weight_decay': 0.0}], lr=0.1, momentum=0.9, nesterov=True)";
    let (diff, moved) = compare(&s, ctor);
    assert!(diff < 1e-6, "SGD differs from torch by {diff}");
    assert!(moved > 0.1, "torch moved the parameters by {moved}");
}

#[test]
fn sgd_plain_momentum_matches_torch() {
    let s = spec(Kind_::Sgd, "weight_decay = 0.0\nmomentum = 0.5");
    let (diff, moved) = compare(&s, "torch.optim.SGD([w, b], lr=0.1, momentum=0.5)");
    assert!(diff < 1e-6, "SGD differs from torch by {diff}");
    assert!(moved > 0.1, "torch moved the parameters by {moved}");
}
