//! The device: GPU, data parallelism and ZeRO stage.
use estimator_wasm::schema::catalogue;
use yew::prelude::*;

use super::choice_field::ChoiceField;
use super::number_field::NumberField;
use super::{options, FormProps, Options};
use crate::field::Field;

#[component]
pub fn ParallelForm(props: &FormProps) -> Html {
    let (s, onset) = (&props.state, &props.onset);
    let form = &s.form;
    let error = |f: Field| props.errors.get(&f).cloned();
    let gpus: Options = catalogue().iter().map(|g| (AttrValue::Static(g.name), AttrValue::Static(g.name))).collect();
    let zero = options(&[
        ("0", "0: DDP replicas"),
        ("1", "1: optimizer states sharded"),
        ("2", "2: + gradients"),
        ("3", "3: + weights (FSDP)"),
    ]);
    html! {
        <fieldset class="device">
            <legend>{ "GPUs" }</legend>
            <ChoiceField field={Field::Gpu} label="GPU" options={gpus} selected={form.gpu.clone()}
                         error={error(Field::Gpu)} onset={onset.clone()} />
            <NumberField field={Field::DataParallel} label="data parallel" unit="GPUs"
                         value={s.text(Field::DataParallel)}
                         error={error(Field::DataParallel)} onset={onset.clone()} />
            <ChoiceField field={Field::ZeroStage} label="ZeRO stage" options={zero} selected={form.zero_stage.to_string()}
                         error={error(Field::ZeroStage)} onset={onset.clone()} />
        </fieldset>
    }
}
