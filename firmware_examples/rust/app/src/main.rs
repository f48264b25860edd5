//! The firmware-shaped use of a generated crate: a static arena, one model,
//! one inference, the scores printed. On a microcontroller the same code runs
//! under `#![no_std]` with your HAL's logging instead of println!.
use kws::{Arena, Error, Model};

static mut ARENA: Arena = Arena::new();

fn main() {
    // SAFETY: the only reference ever taken to ARENA.
    let arena = unsafe { &mut *core::ptr::addr_of_mut!(ARENA) };
    let mut model = Model::new(arena);

    // A fixed test pattern stands in for the sensor data.
    let mut input = [0.0f32; kws::INPUT_0_SIZE];
    for (i, x) in input.iter_mut().enumerate() {
        *x = ((i % 17) as f32 - 8.0) / 8.0;
    }

    let start = std::time::Instant::now();
    let scores = match model.run(&input) {
        Ok(scores) => scores,
        Err(e) => {
            eprintln!("kws: inference failed: {}", e);
            std::process::exit(1);
        }
    };
    let micros = start.elapsed().as_micros();
    let mut best = 0;
    for (i, &s) in scores.iter().enumerate() {
        println!("score {} {:.6}", i, s);
        if s > scores[best] {
            best = i;
        }
    }
    println!("class {} ({} us; arena {} B, flash {} B, {} MACs)", best, micros, kws::ARENA_SIZE,
             kws::WEIGHTS_BYTES, kws::MACS);

    // A wrong input length is an error, not a crash.
    match model.run(&input[..10]) {
        Err(Error::InputLength { expected, got }) => println!("short input refused: {} of {}", got, expected),
        other => panic!("expected an InputLength error, got {:?}", other.map(|s| s.len())),
    }
}
