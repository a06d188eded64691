//! The XML of Azure's settings calls (service properties, table ACLs): a body read into a small
//! tree of elements and their text (with quick-xml, bounded in depth and size by the body's own
//! bound), and text escaped for the answers.

use std::borrow::Cow;

use quick_xml::events::Event;
use quick_xml::Reader;

/// Deepest nesting a settings document has (`StorageServiceProperties/Cors/CorsRule/…`), with room.
const MAX_DEPTH: usize = 8;

/// One element: its name, its text (the concatenation of its text nodes) and its children.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Element {
    pub(super) name: String,
    pub(super) text: String,
    pub(super) children: Vec<Element>,
}

impl Element {
    /// The first child called `name`.
    pub(super) fn child(&self, name: &str) -> Option<&Element> {
        self.children.iter().find(|child| child.name == name)
    }

    /// The children called `name`, in order.
    pub(super) fn children_named<'e>(&'e self, name: &'e str) -> impl Iterator<Item = &'e Element> {
        self.children.iter().filter(move |child| child.name == name)
    }

    /// The element as XML: its text escaped, its children in order.
    pub(super) fn to_xml(&self) -> String {
        let children: String = self.children.iter().map(Element::to_xml).collect();
        format!(
            "<{name}>{}{children}</{name}>",
            escape(self.text.trim()),
            name = self.name
        )
    }

    /// The trimmed text of the first child called `name`, if there is one.
    pub(super) fn text_of(&self, name: &str) -> Option<&str> {
        self.child(name).map(|child| child.text.trim())
    }
}

/// The root element of `body`, or why it is not a well-formed document.
pub(super) fn parse(body: &[u8]) -> Result<Element, String> {
    let text = std::str::from_utf8(body).map_err(|_| "the XML body is not UTF-8".to_owned())?;
    let mut reader = Reader::from_str(text);
    // Open elements, innermost last; the root is kept when it closes.
    let mut open: Vec<Element> = Vec::new();
    let mut root = None;
    loop {
        let at = reader.buffer_position();
        let event = reader
            .read_event()
            .map_err(|error| format!("the XML body is not well-formed at byte {at}: {error}"))?;
        match event {
            Event::Start(_) | Event::Empty(_) if root.is_some() => {
                return Err("the XML body has content after its root element".into());
            }
            Event::Start(start) => {
                if open.len() == MAX_DEPTH {
                    return Err(format!(
                        "the XML body nests deeper than {MAX_DEPTH} elements"
                    ));
                }
                open.push(Element {
                    name: name_of(start.name().as_ref())?,
                    ..Element::default()
                });
            }
            Event::Empty(start) => {
                let element = Element {
                    name: name_of(start.name().as_ref())?,
                    ..Element::default()
                };
                close(element, &mut open, &mut root);
            }
            Event::End(_) => {
                let element = open
                    .pop()
                    .ok_or("the XML body closes an element it never opened")?;
                close(element, &mut open, &mut root);
            }
            Event::Text(text) => append(&mut open, text.xml_content().map_err(bad_text)?)?,
            Event::CData(data) => append(&mut open, data.decode().map_err(bad_text)?)?,
            Event::GeneralRef(reference) => {
                let resolved = match reference.resolve_char_ref().map_err(bad_text)? {
                    Some(c) => Cow::Owned(c.to_string()),
                    None => {
                        let name = reference.decode().map_err(bad_text)?;
                        let known = quick_xml::escape::resolve_predefined_entity(&name);
                        Cow::Borrowed(known.ok_or(format!("the XML body names &{name};"))?)
                    }
                };
                append(&mut open, resolved)?;
            }
            Event::Eof => break,
            Event::Comment(_) | Event::Decl(_) | Event::PI(_) | Event::DocType(_) => {}
        }
    }
    match (root, open.is_empty()) {
        (Some(root), true) => Ok(root),
        _ => Err("the XML body ends inside an element, or has none".into()),
    }
}

fn name_of(name: &[u8]) -> Result<String, String> {
    String::from_utf8(name.to_vec()).map_err(|_| "an XML element's name is not UTF-8".into())
}

fn bad_text(error: impl std::fmt::Display) -> String {
    format!("the XML body's text cannot be read: {error}")
}

/// Adds `text` to the innermost open element (text outside the root must be blank).
fn append(open: &mut [Element], text: Cow<'_, str>) -> Result<(), String> {
    match open.last_mut() {
        Some(element) => element.text.push_str(&text),
        None if text.trim().is_empty() => {}
        None => return Err("the XML body has text outside its root element".into()),
    }
    Ok(())
}

/// Hands a closed `element` to its parent, or makes it the root.
fn close(element: Element, open: &mut [Element], root: &mut Option<Element>) {
    match open.last_mut() {
        Some(parent) => parent.children.push(element),
        None => *root = Some(element),
    }
}

/// `text` escaped for an XML answer.
pub(super) fn escape(text: &str) -> Cow<'_, str> {
    quick_xml::escape::escape(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_document_becomes_a_tree_of_elements_and_text() {
        let root = parse(
            br#"<?xml version="1.0" encoding="utf-8"?>
            <SignedIdentifiers><SignedIdentifier><Id>a&amp;b&#33;</Id>
            <AccessPolicy><Permission>raud</Permission></AccessPolicy></SignedIdentifier>
            <SignedIdentifier><Id><![CDATA[x<y]]></Id></SignedIdentifier><Empty/></SignedIdentifiers>"#,
        )
        .unwrap();
        assert_eq!(root.name, "SignedIdentifiers");
        let ids: Vec<_> = root
            .children_named("SignedIdentifier")
            .map(|s| s.text_of("Id").unwrap())
            .collect();
        assert_eq!(ids, ["a&b!", "x<y"]);
        let first = root.child("SignedIdentifier").unwrap();
        let policy = first.child("AccessPolicy").unwrap();
        assert_eq!(policy.text_of("Permission"), Some("raud"));
        assert!(root.child("Empty").is_some());
        assert_eq!(
            policy.to_xml(),
            "<AccessPolicy><Permission>raud</Permission></AccessPolicy>"
        );
    }

    #[test]
    fn malformed_documents_are_refused_with_the_reason() {
        for bad in [
            &b"<a><b></a>"[..],
            b"<a>",
            b"",
            b"text",
            b"<a/><b/>",
            b"<a>&unknown;</a>",
            b"\xff",
            b"<a><a><a><a><a><a><a><a><a></a></a></a></a></a></a></a></a></a>",
        ] {
            assert!(parse(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
        assert_eq!(escape("<a&'\">"), "&lt;a&amp;&apos;&quot;&gt;");
    }
}
