//! Training levers: micro-batch, precision, optimizer, checkpointing, pruning.
use yew::prelude::*;

use super::choice_field::ChoiceField;
use super::number_field::NumberField;
use super::{options, FormProps};
use crate::field::{word_of, Field};

const PRECISIONS: [(&str, &str); 5] = [
    ("fp32", "fp32"),
    ("fp16", "fp16 autocast"),
    ("bf16", "bf16 autocast"),
    ("pure_bf16", "pure bf16 (no fp32 copy)"),
    ("bf16_master", "bf16 + fp32 master (Megatron)"),
];

#[component]
pub fn TrainingForm(props: &FormProps) -> Html {
    let (s, onset) = (&props.state, &props.onset);
    let form = &s.form;
    let error = |f: Field| props.errors.get(&f).cloned();
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
            <NumberField field={Field::Batch} label="micro-batch" unit="samples per GPU"
                         value={s.text(Field::Batch)}
                         error={error(Field::Batch)} onset={onset.clone()} />
            <ChoiceField field={Field::Precision} label="student precision" options={options(&PRECISIONS)}
                         selected={word_of(&form.precision)} error={error(Field::Precision)} onset={onset.clone()} />
            <ChoiceField field={Field::TeacherPrecision} label="teacher precision" options={options(&PRECISIONS[..3])}
                         selected={word_of(&form.teacher_precision)} error={error(Field::TeacherPrecision)}
                         onset={onset.clone()} />
            <ChoiceField field={Field::Optimizer} label="optimizer" options={options(&[("adamw", "AdamW"), ("sgd", "SGD + momentum")])}
                         selected={word_of(&form.optimizer)} onset={onset.clone()} />
            <ChoiceField field={Field::Checkpointing} label="checkpointing" options={checkpointing}
                         selected={form.checkpointing.clone()} error={error(Field::Checkpointing)} onset={onset.clone()} />
            <NumberField field={Field::Sparsity} label="pruning sparsity" unit="fraction, 0 = no pruning"
                         value={s.text(Field::Sparsity)}
                         error={error(Field::Sparsity)} onset={onset.clone()} />
            <ChoiceField field={Field::Prune} label="pruning method"
                         options={options(&[("magnitude", "magnitude (masks)"), ("structured", "structured (removes units)")])}
                         selected={word_of(&form.prune)} onset={onset.clone()} />
        </fieldset>
    }
}
