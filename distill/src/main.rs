fn main() { println!("{}", tch::Cuda::is_available()); let t = tch::Tensor::from_slice(&[1.0f32,2.0]); t.print(); }
