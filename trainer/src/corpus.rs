//! The built-in default corpus: small stories about a village, generated here from a fixed seed.
//!
//! `vramfit train` with no data must run on a fresh machine with nothing downloaded, and must
//! visibly learn. The generator writes English-like text with structure a small model can pick up
//! in a minute: a fixed word list (spelling), sentence templates (word order), agreement between a
//! subject and its verb, a person and their pronoun, numbers and plural nouns, and paragraphs that
//! keep one character per story. Everything is written in this file; no text is copied from
//! anywhere. The same seed always gives the same text, so a checkpoint only records "builtin".

use crate::model::HostRng;

/// The version of the generator; a checkpoint records it, and changing the text means a new one.
pub const CORPUS_VERSION: u32 = 1;

/// Characters of text [`generate`] writes by default (about 10 % of them become the val split).
pub const DEFAULT_CHARS: usize = 400_000;

/// (name, pronoun, possessive)
const PEOPLE: [(&str, &str, &str); 10] = [
    ("anna", "she", "her"),
    ("tomas", "he", "his"),
    ("mira", "she", "her"),
    ("jon", "he", "his"),
    ("elsa", "she", "her"),
    ("karl", "he", "his"),
    ("ida", "she", "her"),
    ("oskar", "he", "his"),
    ("lena", "she", "her"),
    ("piet", "he", "his"),
];

const TRADES: [&str; 8] = ["baker", "miller", "smith", "weaver", "fisher", "potter", "farmer", "carpenter"];

/// (singular, plural)
const THINGS: [(&str, &str); 12] = [
    ("apple", "apples"),
    ("basket", "baskets"),
    ("loaf", "loaves"),
    ("fish", "fish"),
    ("jug", "jugs"),
    ("candle", "candles"),
    ("knife", "knives"),
    ("box", "boxes"),
    ("pear", "pears"),
    ("rope", "ropes"),
    ("cup", "cups"),
    ("stone", "stones"),
];

const PLACES: [&str; 8] = ["the river", "the market", "the mill", "the old bridge", "the forest", "the harbour", "the square", "the hill"];

const ADJECTIVES: [&str; 10] = ["red", "small", "heavy", "old", "green", "warm", "round", "bright", "wooden", "sharp"];

/// (present tense with -s, past tense)
const MOVES: [(&str, &str); 5] = [("walks", "walked"), ("runs", "ran"), ("rides", "rode"), ("hurries", "hurried"), ("goes", "went")];

const NUMBERS: [&str; 8] = ["two", "three", "four", "five", "six", "seven", "eight", "nine"];

const TIMES: [&str; 6] = ["in the morning", "at noon", "in the evening", "at night", "before dawn", "after the rain"];

const WEATHER: [&str; 5] = ["the sky is grey", "the wind is cold", "the sun is warm", "the rain falls softly", "the air is still"];

fn pick<'a, T>(rng: &mut HostRng, items: &'a [T]) -> &'a T {
    &items[(rng.next_u64() % items.len() as u64) as usize]
}

/// One story: a person, a trade and a few sentences that keep to them.
fn story(rng: &mut HostRng, out: &mut String) {
    let (name, he, his) = *pick(rng, &PEOPLE);
    let trade = *pick(rng, &TRADES);
    let place = *pick(rng, &PLACES);
    let time = *pick(rng, &TIMES);
    out.push_str(&format!("{name} the {trade} lives near {place}.\n"));
    let sentences = 3 + (rng.next_u64() % 4) as usize;
    for _ in 0..sentences {
        let (thing, things) = *pick(rng, &THINGS);
        let adjective = *pick(rng, &ADJECTIVES);
        let count = *pick(rng, &NUMBERS);
        let line = match rng.next_u64() % 7 {
            0 => {
                let (moves, _) = *pick(rng, &MOVES);
                format!("{time} {he} {moves} to {} with a {adjective} {thing}.", pick(rng, &PLACES))
            }
            1 => format!("{he} sells {count} {things} at the market and counts {his} coins."),
            2 => format!("{his} {thing} is {adjective}, and {he} keeps it by the door."),
            3 => {
                let (_, moved) = *pick(rng, &MOVES);
                format!("yesterday {name} {moved} home and carried {count} {adjective} {things}.")
            }
            4 => format!("{}, so {name} stays inside and mends {his} {things}.", pick(rng, &WEATHER)),
            5 => {
                let (friend, _, _) = *pick(rng, &PEOPLE);
                format!("{friend} asks, \"{name}, where is the {adjective} {thing}?\" and {he} says, \"by {place}.\"")
            }
            _ => format!("the {trade} has {count} {things}; one {thing} is {adjective}."),
        };
        out.push_str(&line);
        out.push('\n');
    }
    out.push('\n');
}

/// At least `chars` characters of stories (whole stories, so a little more), always the same
/// for the same `seed`.
pub fn generate(seed: u64, chars: usize) -> String {
    let mut rng = HostRng::new(seed);
    let mut out = String::with_capacity(chars + 512);
    while out.len() < chars {
        story(&mut rng, &mut out);
    }
    out
}

/// The default corpus `vramfit train` uses when given no data.
pub fn builtin() -> String {
    generate(0x0076_7261_6d66_6974, DEFAULT_CHARS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_ascii_and_varied() {
        let a = generate(1, 20_000);
        assert_eq!(a, generate(1, 20_000));
        assert_ne!(a, generate(2, 20_000));
        assert!(a.len() >= 20_000 && a.is_ascii());
        // Every person appears in a long enough text, with their own pronoun after their intro.
        for (name, he, _) in PEOPLE {
            assert!(a.contains(&format!("{name} the ")), "{name}");
            let intro = a.find(&format!("\n{name} the ")).map(|i| i + 1).unwrap_or(0);
            let story = a[intro..].split("\n\n").next().unwrap();
            assert!(story[name.len()..].contains(he), "{story}");
        }
        // Few distinct characters, as a character vocabulary should be.
        let mut chars: Vec<char> = builtin().chars().collect();
        chars.sort_unstable();
        chars.dedup();
        assert!(chars.len() < 40, "{}", chars.len());
    }
}
