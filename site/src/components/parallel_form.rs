//! The device: GPU, data parallelism and ZeRO stage.
use estimator_wasm::explorer::FormField;
use estimator_wasm::schema::catalogue;
use yew::prelude::*;

use super::choice_field::ChoiceField;
use super::number_field::NumberField;
use super::{options, FormProps, Options};

#[component]
pub fn ParallelForm(props: &FormProps) -> Html {
    let (s, onset) = (&props.state, &props.onset);
    let form = &s.form;
    let error = |f: FormField| props.errors.get(&f).cloned();
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
            <ChoiceField field={FormField::Gpu} label="GPU" options={gpus} selected={form.gpu.clone()}
                         error={error(FormField::Gpu)} onset={onset.clone()} />
            <NumberField field={FormField::DataParallel} label="data parallel" unit="GPUs"
                         value={s.text(FormField::DataParallel)}
                         error={error(FormField::DataParallel)} onset={onset.clone()} />
            <ChoiceField field={FormField::ZeroStage} label="ZeRO stage" options={zero} selected={form.zero_stage.to_string()}
                         error={error(FormField::ZeroStage)} onset={onset.clone()} />
        </fieldset>
    }
}
