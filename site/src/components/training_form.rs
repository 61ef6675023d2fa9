//! Training levers: micro-batch, precision, optimizer, checkpointing, pruning.
use estimator_wasm::explorer::FormField;
use yew::prelude::*;

use super::choice_field::ChoiceField;
use super::number_field::NumberField;
use super::{options, FormProps};
use crate::field::word_of;

const PRECISIONS: [(&str, &str); 5] = [
    ("fp32", "fp32"),
    ("fp16", "fp16 autocast"),
    ("bf16", "bf16 autocast"),
    ("pure_bf16", "pure bf16 (no fp32 copy)"),
    ("bf16_master", "bf16 + fp32 master (Megatron)"),
];
/// The teacher runs without autocast: priced with its weights cast to the 16-bit type.
const TEACHER_PRECISIONS: [(&str, &str); 3] =
    [("fp32", "fp32"), ("fp16", "fp16 (weights cast to 16-bit)"), ("bf16", "bf16 (weights cast to 16-bit)")];

#[component]
pub fn TrainingForm(props: &FormProps) -> Html {
    let (s, onset) = (&props.state, &props.onset);
    let form = &s.form;
    let error = |f: FormField| props.errors.get(&f).cloned();
    let checkpointing = options(&[
        ("none", "none"),
        ("sqrt", "sqrt(n) segments"),
        ("2", "2 segments"),
        ("4", "4 segments"),
        ("8", "8 segments"),
    ]);
    html! {
        <fieldset class="training">
            <legend>{ "Training" }</legend>
            <NumberField field={FormField::Batch} label="micro-batch" unit="samples per GPU"
                         value={s.text(FormField::Batch)}
                         error={error(FormField::Batch)} onset={onset.clone()} />
            <NumberField field={FormField::EvalBatch} label="evaluation batch" unit="samples per GPU, the no-grad pass each epoch"
                         value={s.text(FormField::EvalBatch)}
                         error={error(FormField::EvalBatch)} onset={onset.clone()} />
            <ChoiceField field={FormField::Precision} label="student precision" options={options(&PRECISIONS)}
                         selected={word_of(&form.precision)} error={error(FormField::Precision)} onset={onset.clone()} />
            <ChoiceField field={FormField::TeacherPrecision} label="teacher precision" options={options(&TEACHER_PRECISIONS)}
                         selected={word_of(&form.teacher_precision)} error={error(FormField::TeacherPrecision)}
                         onset={onset.clone()} />
            <ChoiceField field={FormField::Optimizer} label="optimizer" options={options(&[("adamw", "AdamW"), ("sgd", "SGD + momentum")])}
                         selected={word_of(&form.optimizer)} error={error(FormField::Optimizer)} onset={onset.clone()} />
            <ChoiceField field={FormField::Checkpointing} label="checkpointing" options={checkpointing}
                         selected={form.checkpointing.clone()} error={error(FormField::Checkpointing)} onset={onset.clone()} />
            <NumberField field={FormField::Sparsity} label="pruning sparsity" unit="fraction, 0 = no pruning"
                         value={s.text(FormField::Sparsity)}
                         error={error(FormField::Sparsity)} onset={onset.clone()} />
            <ChoiceField field={FormField::Prune} label="pruning method"
                         options={options(&[("magnitude", "magnitude (masks)"), ("structured", "structured (removes units)")])}
                         selected={word_of(&form.prune)} error={error(FormField::Prune)} onset={onset.clone()} />
        </fieldset>
    }
}
