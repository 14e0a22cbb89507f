//! Parsing a page as a browser does: the HTML5 tree construction algorithm
//! (html5ever) into `scraper`'s tree, with a bound on how deep elements nest.
//!
//! The bound is there because the algorithm walks the stack of open elements
//! on many start tags: a page of nothing but nested `<div>`s makes the parse
//! quadratic (a 2 MiB page would keep a core busy for minutes). Browsers cap
//! the depth themselves (Blink at 512) and no page is written that deep, so a
//! parse stops once an element lies deeper than [`MAX_DEPTH`], and the page is
//! reported as not readable.

use std::borrow::Cow;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;

use ego_tree::NodeId;
use html5ever::tendril::{StrTendril, TendrilSink};
use html5ever::tree_builder::{ElementFlags, NodeOrText, QuirksMode, TreeSink};
use html5ever::{Attribute, QualName};
use scraper::{Html, HtmlTreeSink};

/// The deepest an element may lie below the document, as in Blink.
pub const MAX_DEPTH: u32 = 512;
/// Bytes handed to the parser at a time; between two, the depth is checked.
const CHUNK: usize = 1024;

/// A parsed page.
pub struct Parsed {
    pub html: Html,
    /// The page nests elements deeper than [`MAX_DEPTH`]; `html` holds only
    /// the part read before that.
    pub too_deep: bool,
}

/// Parses `text` as an HTML5 document.
pub fn parse(text: &str) -> Parsed {
    let sink = DepthSink {
        inner: HtmlTreeSink::new(Html::new_document()),
        depths: RefCell::new(HashMap::new()),
        too_deep: Cell::new(false),
    };
    let mut parser = html5ever::parse_document(sink, Default::default());
    let mut rest = text;
    while !rest.is_empty() && !parser.tokenizer.sink.sink.too_deep.get() {
        let mut end = rest.len().min(CHUNK);
        while !rest.is_char_boundary(end) {
            end += 1;
        }
        parser.process(StrTendril::from_slice(&rest[..end]));
        rest = &rest[end..];
    }
    let (html, too_deep) = parser.finish();
    Parsed { html, too_deep }
}

/// scraper's tree sink, which also tracks how deep each node lies.
struct DepthSink {
    inner: HtmlTreeSink,
    /// Depth below the document of every node placed so far.
    depths: RefCell<HashMap<NodeId, u32>>,
    too_deep: Cell<bool>,
}

impl DepthSink {
    fn depth(&self, node: &NodeId) -> u32 {
        self.depths.borrow().get(node).copied().unwrap_or(0)
    }

    fn place(&self, child: &NodeOrText<NodeId>, depth: u32) {
        if let NodeOrText::AppendNode(node) = child {
            self.depths.borrow_mut().insert(*node, depth);
            if depth > MAX_DEPTH {
                self.too_deep.set(true);
            }
        }
    }
}

/// Every call goes to scraper's sink; placing a node also records its depth.
impl TreeSink for DepthSink {
    type Output = (Html, bool);
    type Handle = NodeId;
    type ElemName<'a> = <HtmlTreeSink as TreeSink>::ElemName<'a>;

    fn finish(self) -> (Html, bool) {
        (self.inner.finish(), self.too_deep.get())
    }

    fn parse_error(&self, msg: Cow<'static, str>) {
        self.inner.parse_error(msg);
    }

    fn get_document(&self) -> NodeId {
        self.inner.get_document()
    }

    fn elem_name<'a>(&'a self, target: &'a NodeId) -> Self::ElemName<'a> {
        self.inner.elem_name(target)
    }

    fn create_element(&self, name: QualName, attrs: Vec<Attribute>, flags: ElementFlags) -> NodeId {
        self.inner.create_element(name, attrs, flags)
    }

    fn create_comment(&self, text: StrTendril) -> NodeId {
        self.inner.create_comment(text)
    }

    fn create_pi(&self, target: StrTendril, data: StrTendril) -> NodeId {
        self.inner.create_pi(target, data)
    }

    fn append(&self, parent: &NodeId, child: NodeOrText<NodeId>) {
        self.place(&child, self.depth(parent) + 1);
        self.inner.append(parent, child);
    }

    fn append_based_on_parent_node(
        &self,
        element: &NodeId,
        prev_element: &NodeId,
        child: NodeOrText<NodeId>,
    ) {
        self.place(
            &child,
            self.depth(element).max(self.depth(prev_element) + 1),
        );
        self.inner
            .append_based_on_parent_node(element, prev_element, child);
    }

    fn append_doctype_to_document(
        &self,
        name: StrTendril,
        public_id: StrTendril,
        system_id: StrTendril,
    ) {
        self.inner
            .append_doctype_to_document(name, public_id, system_id);
    }

    fn mark_script_already_started(&self, node: &NodeId) {
        self.inner.mark_script_already_started(node);
    }

    fn pop(&self, node: &NodeId) {
        self.inner.pop(node);
    }

    fn get_template_contents(&self, target: &NodeId) -> NodeId {
        let contents = self.inner.get_template_contents(target);
        let depth = self.depth(target) + 1;
        self.depths.borrow_mut().insert(contents, depth);
        contents
    }

    fn same_node(&self, x: &NodeId, y: &NodeId) -> bool {
        self.inner.same_node(x, y)
    }

    fn set_quirks_mode(&self, mode: QuirksMode) {
        self.inner.set_quirks_mode(mode);
    }

    fn append_before_sibling(&self, sibling: &NodeId, new_node: NodeOrText<NodeId>) {
        self.place(&new_node, self.depth(sibling));
        self.inner.append_before_sibling(sibling, new_node);
    }

    fn add_attrs_if_missing(&self, target: &NodeId, attrs: Vec<Attribute>) {
        self.inner.add_attrs_if_missing(target, attrs);
    }

    fn associate_with_form(
        &self,
        target: &NodeId,
        form: &NodeId,
        nodes: (&NodeId, Option<&NodeId>),
    ) {
        self.inner.associate_with_form(target, form, nodes);
    }

    fn remove_from_parent(&self, target: &NodeId) {
        self.inner.remove_from_parent(target);
    }

    fn reparent_children(&self, node: &NodeId, new_parent: &NodeId) {
        // The children keep the depth they had: a bound, not a measure.
        self.inner.reparent_children(node, new_parent);
    }

    fn is_mathml_annotation_xml_integration_point(&self, handle: &NodeId) -> bool {
        self.inner
            .is_mathml_annotation_xml_integration_point(handle)
    }

    fn set_current_line(&self, line_number: u64) {
        self.inner.set_current_line(line_number);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(depth: usize) -> String {
        format!(
            "{}<p>info@acme.test</p>{}",
            "<div>".repeat(depth),
            "</div>".repeat(depth)
        )
    }

    #[test]
    fn a_page_nested_as_deep_as_a_browser_renders_is_read_whole() {
        // html, body, the divs and the p: 3 levels besides the divs.
        let parsed = parse(&nested(MAX_DEPTH as usize - 3));
        assert!(!parsed.too_deep);
        assert!(
            parsed
                .html
                .root_element()
                .text()
                .any(|t| t.contains("info@acme.test"))
        );
    }

    #[test]
    fn a_page_nested_deeper_stops_the_parse_at_once() {
        assert!(parse(&nested(MAX_DEPTH as usize - 2)).too_deep);
        // 400,000 levels (a 2 MiB page) would keep the parser busy for
        // minutes; the bound stops it after the first few hundred.
        let parsed = parse(&"<div>".repeat(400_000));
        assert!(parsed.too_deep);
        assert!(parsed.html.tree.nodes().count() < 2 * MAX_DEPTH as usize);
    }

    #[test]
    fn wide_pages_and_misnested_formatting_do_not_count_as_deep() {
        let wide = "<div><p>x</p></div>".repeat(50_000);
        assert!(!parse(&wide).too_deep);
        let misnested = "<b><i>x</b></i>".repeat(5_000);
        assert!(!parse(&misnested).too_deep);
        let unclosed = "<li>x<p>y<td>z".repeat(5_000);
        assert!(!parse(&unclosed).too_deep);
    }
}
