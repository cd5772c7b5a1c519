//! The shape guard: how deep a profile nests and how much its aliases repeat, measured on the
//! YAML parser's own events before anything is built from them.
//!
//! # Why it cannot be bypassed
//!
//! An earlier guard scanned the text for `[` and `{` with its own idea of quoting and
//! comments; wherever that idea differed from YAML's (`name: Bob's`, `[a#b, …]`) nesting hid
//! from it. This guard has no idea of its own: it runs libyaml (`unsafe-libyaml`, the parser
//! `serde_yaml_ng` deserializes from), set up exactly as `serde_yaml_ng` sets it up (UTF-8
//! input from the same string), and counts the sequence and mapping *events* it emits. Every
//! collection `serde_yaml_ng` can see is one of those events, whether written in flow style
//! (`[`, `{`) or in block style (indentation, `- - -`, `? `), and quoting, comments and block
//! scalars have already been resolved by the parser itself, so nothing can be nesting to
//! `serde_yaml_ng` and text to this guard. Aliases are followed too, resolved as
//! `serde_yaml_ng` resolves them (to the node that last took the name, from that node's start):
//! an alias stands for its anchor's whole node, so the depth it adds and the nodes it repeats
//! are those of that node, and an alias inside the node it names (a node containing itself) is
//! refused.
//!
//! The parser stops at the first collection deeper than [`MAX_PROFILE_NESTING`]; the depth
//! bounds libyaml's per-token work (it walks its open flow levels for every token, which made
//! deep nesting quadratic), so the walk and the parse after it take time linear in the source.
//! Aliases may repeat at most [`MAX_PROFILE_ALIAS_NODES`] nodes in all, so what the
//! deserializer reads (each alias replays its anchor's events) is linear too: a "billion
//! laughs" is refused after a few thousand events.

use std::collections::HashMap;
use std::ffi::CStr;
use std::marker::PhantomData;
use std::mem::MaybeUninit;

use super::error::{ProfileError, ProfileErrorKind};

/// The deepest nesting of collections (sequences and mappings, flow or block style, aliases
/// expanded) a profile may have; the reference profile nests four deep.
pub const MAX_PROFILE_NESTING: usize = 32;

/// The most nodes (scalars and collections) that aliases may repeat in one profile, counting
/// each alias as the whole node it stands for.
pub const MAX_PROFILE_ALIAS_NODES: u64 = 1 << 20;

/// What the guard needs of one event.
struct Event {
    kind: unsafe_libyaml::yaml_event_type_t,
    /// 1-based line and column of the event's start.
    at: (usize, usize),
    /// The anchor a node defines, or the one an alias names.
    anchor: Option<Vec<u8>>,
}

/// A libyaml parser reading `src`, which it points into (hence the lifetime).
struct Parser<'src> {
    /// Boxed: libyaml keeps a pointer to the parser in the parser (its read handler's data).
    raw: Box<MaybeUninit<unsafe_libyaml::yaml_parser_t>>,
    src: PhantomData<&'src str>,
}

impl<'src> Parser<'src> {
    fn new(src: &'src str) -> Option<Parser<'src>> {
        let mut raw = Box::new(MaybeUninit::<unsafe_libyaml::yaml_parser_t>::uninit());
        let p = raw.as_mut_ptr();
        // SAFETY: `p` points to writable memory for a parser, which `initialize` fills in.
        if unsafe { unsafe_libyaml::yaml_parser_initialize(p) }.fail {
            return None;
        }
        // SAFETY: `p` is initialized; `src` outlives the parser (the `'src` borrow), which
        // only reads it. The same two calls as `serde_yaml_ng`'s parser, so the same events.
        unsafe {
            unsafe_libyaml::yaml_parser_set_encoding(p, unsafe_libyaml::YAML_UTF8_ENCODING);
            unsafe_libyaml::yaml_parser_set_input_string(p, src.as_ptr(), src.len() as u64);
        }
        Some(Parser {
            raw,
            src: PhantomData,
        })
    }

    /// The next event; `None` at a syntax error (which `serde_yaml_ng` then reports).
    fn next(&mut self) -> Option<Event> {
        let mut ev = MaybeUninit::<unsafe_libyaml::yaml_event_t>::uninit();
        // SAFETY: the parser is initialized and its input alive; `ev` is written on success.
        if unsafe { unsafe_libyaml::yaml_parser_parse(self.raw.as_mut_ptr(), ev.as_mut_ptr()) }.fail
        {
            return None;
        }
        // SAFETY: `parse` succeeded, so it wrote the event.
        let mut ev = unsafe { ev.assume_init() };
        // SAFETY: the union member read is the one `type_` says is set; anchors are NULL or
        // NUL-terminated strings owned by the event, copied before it is deleted.
        let anchor = unsafe {
            let ptr = match ev.type_ {
                unsafe_libyaml::YAML_ALIAS_EVENT => ev.data.alias.anchor,
                unsafe_libyaml::YAML_SCALAR_EVENT => ev.data.scalar.anchor,
                unsafe_libyaml::YAML_SEQUENCE_START_EVENT => ev.data.sequence_start.anchor,
                unsafe_libyaml::YAML_MAPPING_START_EVENT => ev.data.mapping_start.anchor,
                _ => core::ptr::null_mut(),
            };
            (!ptr.is_null()).then(|| CStr::from_ptr(ptr.cast()).to_bytes().to_vec())
        };
        let out = Event {
            kind: ev.type_,
            at: (
                ev.start_mark.line as usize + 1,
                ev.start_mark.column as usize + 1,
            ),
            anchor,
        };
        // SAFETY: the event came from `parse` and is deleted once.
        unsafe { unsafe_libyaml::yaml_event_delete(&mut ev) };
        Some(out)
    }
}

impl Drop for Parser<'_> {
    fn drop(&mut self) {
        // SAFETY: initialized in `new` (a `Parser` exists only then), deleted once.
        unsafe { unsafe_libyaml::yaml_parser_delete(self.raw.as_mut_ptr()) }
    }
}

/// An open collection.
struct Open {
    /// Its entry in `defs`, if it is anchored.
    def: Option<usize>,
    /// Nodes in it so far, itself included, aliases expanded.
    nodes: u64,
    /// Its height so far (1: no collection inside), aliases expanded.
    height: usize,
}

/// The size and height of an anchored node, aliases in it expanded.
#[derive(Clone, Copy)]
struct Anchored {
    nodes: u64,
    height: usize,
}

fn refuse(message: String, at: (usize, usize)) -> ProfileError {
    ProfileError::new(ProfileErrorKind::Syntax, message).at(Some(at))
}

/// Refuses a source whose collections nest deeper than [`MAX_PROFILE_NESTING`] or whose
/// aliases repeat more than [`MAX_PROFILE_ALIAS_NODES`] nodes, pointing at the collection or
/// alias that goes over. A syntax error is left for the deserializer to report (it meets the
/// same one, at the same place, having seen only what this walk saw before it).
pub(super) fn check_shape(src: &str) -> Result<(), ProfileError> {
    let Some(mut parser) = Parser::new(src) else {
        return Err(ProfileError::new(
            ProfileErrorKind::Syntax,
            "the YAML parser could not start".into(),
        ));
    };
    let mut open: Vec<Open> = Vec::new();
    // As `serde_yaml_ng` resolves aliases: a name stands for the node that last took it, from
    // that node's start event on (so an alias inside the node it names stands for that node,
    // which is still open: `None`).
    let mut anchors: HashMap<Vec<u8>, usize> = HashMap::new();
    let mut defs: Vec<Option<Anchored>> = Vec::new();
    let mut repeated = 0u64;
    // Adds a finished node (of `nodes` nodes and `height`) to the collection holding it.
    let add = |open: &mut Vec<Open>, nodes: u64, height: usize| {
        if let Some(parent) = open.last_mut() {
            parent.nodes = parent.nodes.saturating_add(nodes);
            parent.height = parent.height.max(height + 1);
        }
    };
    while let Some(ev) = parser.next() {
        match ev.kind {
            unsafe_libyaml::YAML_SEQUENCE_START_EVENT
            | unsafe_libyaml::YAML_MAPPING_START_EVENT => {
                if open.len() >= MAX_PROFILE_NESTING {
                    return Err(refuse(
                        format!("collections nested more than {MAX_PROFILE_NESTING} deep"),
                        ev.at,
                    ));
                }
                let def = ev.anchor.map(|a| {
                    defs.push(None);
                    anchors.insert(a, defs.len() - 1);
                    defs.len() - 1
                });
                open.push(Open {
                    def,
                    nodes: 1,
                    height: 1,
                });
            }
            unsafe_libyaml::YAML_SEQUENCE_END_EVENT | unsafe_libyaml::YAML_MAPPING_END_EVENT => {
                let Some(done) = open.pop() else { break };
                if let Some(d) = done.def {
                    defs[d] = Some(Anchored {
                        nodes: done.nodes,
                        height: done.height,
                    });
                }
                add(&mut open, done.nodes, done.height);
            }
            unsafe_libyaml::YAML_SCALAR_EVENT => {
                if let Some(a) = ev.anchor {
                    defs.push(Some(Anchored {
                        nodes: 1,
                        height: 0,
                    }));
                    anchors.insert(a, defs.len() - 1);
                }
                add(&mut open, 1, 0);
            }
            unsafe_libyaml::YAML_ALIAS_EVENT => {
                // An unknown anchor is the deserializer's error to report; count it as one.
                let node = match ev.anchor.and_then(|a| anchors.get(&a).copied()) {
                    None => Anchored {
                        nodes: 1,
                        height: 0,
                    },
                    Some(d) => defs[d].ok_or_else(|| {
                        refuse(
                            "an alias inside the node it names (that node would contain \
                             itself)"
                                .into(),
                            ev.at,
                        )
                    })?,
                };
                if open.len() + node.height > MAX_PROFILE_NESTING {
                    return Err(refuse(
                        format!(
                            "collections nested more than {MAX_PROFILE_NESTING} deep (through an \
                             alias)"
                        ),
                        ev.at,
                    ));
                }
                repeated = repeated.saturating_add(node.nodes);
                if repeated > MAX_PROFILE_ALIAS_NODES {
                    return Err(refuse(
                        format!(
                            "aliases repeat more than {MAX_PROFILE_ALIAS_NODES} nodes (an alias \
                             stands for its anchor's whole node)"
                        ),
                        ev.at,
                    ));
                }
                add(&mut open, node.nodes, node.height);
            }
            unsafe_libyaml::YAML_STREAM_END_EVENT => break,
            _ => {}
        }
    }
    Ok(())
}
