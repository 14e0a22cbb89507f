use super::*;
use crate::gates::email::address::parse_email;

fn find(html: &str, email: &str) -> Found {
    PageText::from_body(html.as_bytes()).find(&parse_email(email).unwrap())
}

fn is_exact(found: &Found) -> bool {
    matches!(found, Found::Exact { .. })
}

#[test]
fn a_written_out_address_is_found_with_a_snippet() {
    let found = find(
        "<p>Write to   info@acme.test\nfor offers</p>",
        "info@acme.test",
    );
    assert_eq!(
        found,
        Found::Exact {
            snippet: "<p>Write to info@acme.test for offers</p>".into()
        }
    );
}

#[test]
fn the_domain_is_compared_in_any_case_but_the_local_part_exactly() {
    assert!(is_exact(&find(
        "INFO@ACME.TEST? no: Info@ACME.Test",
        "Info@acme.test"
    )));
    assert_eq!(
        find("mail info@acme.test", "INFO@acme.test"),
        Found::OtherCase {
            written: "info@acme.test".into(),
            snippet: "mail info@acme.test".into()
        }
    );
}

#[test]
fn entities_mailto_links_and_email_protection_are_decoded() {
    assert!(is_exact(&find("info&#64;acme&#46;test", "info@acme.test")));
    assert!(is_exact(&find("info&#x40;acme.test", "info@acme.test")));
    assert!(is_exact(&find(
        "info&commat;acme&period;test",
        "info@acme.test"
    )));
    assert!(is_exact(&find(
        "<a href=\"mailto:sales%40acme.test?subject=hi\">Write us</a>",
        "sales@acme.test"
    )));
    assert!(is_exact(&find(
        "<a href=\"MAILTO:sales@acme.test\">Write us</a>",
        "sales@acme.test"
    )));
    // Cloudflare's protection of "info@acme.test" with key 0x42.
    let key = 0x42u8;
    let hex: String = std::iter::once(key)
        .chain(b"info@acme.test".iter().map(|b| b ^ key))
        .map(|b| format!("{b:02x}"))
        .collect();
    assert!(is_exact(&find(
        &format!("<a class=\"__cf_email__\" data-cfemail=\"{hex}\">[email&#160;protected]</a>"),
        "info@acme.test"
    )));
    assert!(is_exact(&find(
        &format!("<a href=\"/cdn-cgi/l/email-protection#{hex}\">mail</a>"),
        "info@acme.test"
    )));
    assert_eq!(decode_cfemail("zz"), None);
    assert_eq!(decode_cfemail(""), None);
}

#[test]
fn invisible_characters_inside_an_address_are_ignored_as_a_browser_does() {
    assert!(is_exact(&find(
        "info\u{200B}@acme&shy;.test",
        "info@acme.test"
    )));
    assert!(is_exact(&find("in&#8203;fo@acme.test", "info@acme.test")));
}

#[test]
fn a_part_of_a_longer_address_is_not_the_address() {
    assert_eq!(find("info@acme.test", "o@acme.test"), Found::Absent);
    assert_eq!(
        find("info@acme.test.evil.test", "info@acme.test"),
        Found::Absent
    );
    assert_eq!(find("info@acme.tester", "info@acme.test"), Found::Absent);
    assert_eq!(find("x@acme.test", "info@acme.test"), Found::Absent);
    assert!(is_exact(&find("(info@acme.test).", "info@acme.test")));
    assert!(is_exact(&find("info@acme.test로 문의", "info@acme.test")));
    assert!(is_exact(&find("mail:.info@acme.test", "info@acme.test")));
}

#[test]
fn an_address_only_in_a_comment_or_split_by_tags_is_told_apart() {
    assert_eq!(
        find("<p>hi</p><!-- old: info@acme.test -->", "info@acme.test"),
        Found::InComment {
            snippet: "<!-- old: info@acme.test -->".into()
        }
    );
    assert!(matches!(
        find(
            "<p>hi</p><!-- unterminated info@acme.test",
            "info@acme.test"
        ),
        Found::InComment { .. }
    ));
    assert_eq!(
        find("<span>info</span>@<span>acme.test</span>", "info@acme.test"),
        Found::BetweenTags {
            snippet: "info@acme.test".into()
        }
    );
}

#[test]
fn an_address_only_where_no_visitor_sees_it_is_hidden() {
    for html in [
        "<p>hi</p><script>var to = 'info@acme.test';</script>",
        "<style>/* info@acme.test */</style>",
        "<template><p>info@acme.test</p></template>",
        "<p>hi</p><![CDATA[ info@acme.test ]]>",
        "<input type=\"hidden\" name=\"to\" value=\"info@acme.test\">",
        "<meta name=\"reply-to\" content=\"info&#64;acme.test\">",
        "<img src=\"https://cdn.test/x?to=info@acme.test\" alt=\"\">",
        "<a href=\"https://acme.test/?e=info@acme.test\">write</a>",
        "<div title='info@acme.test'>x</div>",
        "<div data-x=\"a>b info@acme.test\">x</div>",
        "<p>hi</p><SCRIPT type=module>send('info@acme.test')",
    ] {
        assert!(
            matches!(find(html, "info@acme.test"), Found::Hidden { .. }),
            "{html}: {:?}",
            find(html, "info@acme.test")
        );
    }
    // A mailto link is something a visitor clicks, and a hidden copy
    // does not hide the address written beside it.
    for html in [
        "<a href=\"mailto:info@acme.test\">mail</a>",
        "<a href='&#109;ailto:info&#64;acme.test'>mail</a>",
        "<a class=x href=mailto:info@acme.test>mail</a>",
        "<script>x('info@acme.test')</script><p>info@acme.test</p><input value=\"info@acme.test\">",
        "if x < 5 write to info@acme.test, and if y > 3 call",
    ] {
        assert!(is_exact(&find(html, "info@acme.test")), "{html}");
    }
    assert_eq!(
        find(
            "<a href=\"mailto:info@acme.test\">mail</a>",
            "info@acme.test"
        ),
        Found::Exact {
            snippet: "<a info@acme.test>mail</a>".into()
        },
        "the link's address stands where the link is"
    );
}

#[test]
fn an_unclosed_attribute_hides_the_rest_of_the_page_as_in_a_browser() {
    // A browser drops a tag still open at the end of the page, and with it
    // everything after its unclosed quote; a regex saw the address.
    assert_eq!(
        find(
            "<p>Welcome</p><span title=\"a>info@acme.test</span>",
            "info@acme.test"
        ),
        Found::Absent
    );
    assert!(is_exact(&find(
        "<p>Welcome</p><span title=\"a\">info@acme.test</span>",
        "info@acme.test"
    )));
}

#[test]
fn a_script_or_comment_opener_inside_an_attribute_hides_nothing() {
    for html in [
        "<p title=\"<script>\">Write to info@acme.test</p>",
        "<img alt='<style>'><p>info@acme.test</p>",
        "<div title=\"<!--\">info@acme.test</div><p>--></p>",
    ] {
        assert!(
            is_exact(&find(html, "info@acme.test")),
            "{html}: {:?}",
            find(html, "info@acme.test")
        );
    }
}

#[test]
fn a_hidden_attribute_or_an_inline_style_that_hides_hides_every_descendant() {
    for html in [
        "<div hidden><p>Mail: <b>info@acme.test</b></p></div>",
        "<div HIDDEN=until-found>info@acme.test</div>",
        "<section style=\"color: red; DISPLAY : None !important\"><p><span>info@acme.test</span></p></section>",
        "<div style='visibility:hidden'><p>info@acme.test</p></div>",
        "<p hidden><a href=\"mailto:info@acme.test\">write</a></p>",
        "<iframe><p>info@acme.test</p></iframe>",
    ] {
        assert!(
            matches!(find(html, "info@acme.test"), Found::Hidden { .. }),
            "{html}: {:?}",
            find(html, "info@acme.test")
        );
    }
    for html in [
        "<div style=\"display: block\"><div hidden>x</div><p>info@acme.test</p></div>",
        "<div style=\"font-family: none\">info@acme.test</div>",
        "<div data-style=\"display:none\">info@acme.test</div>",
    ] {
        assert!(is_exact(&find(html, "info@acme.test")), "{html}");
    }
    assert!(!style_hides("display"));
    assert!(style_hides("x: y; visibility: collapse"));
}

#[test]
fn comments_end_where_html5_ends_them() {
    for html in [
        "<!-- old --!> write to info@acme.test",
        "<!--> write to info@acme.test -->",
        "<!---> write to info@acme.test -->",
    ] {
        assert!(
            is_exact(&find(html, "info@acme.test")),
            "{html}: {:?}",
            find(html, "info@acme.test")
        );
    }
    assert!(matches!(
        find("<p>x</p><!--info@acme.test-->", "info@acme.test"),
        Found::InComment { .. }
    ));
}

#[test]
fn a_page_nested_deeper_than_a_browser_renders_is_said_to_be() {
    let depth = 100_000;
    let html = format!(
        "{}info@acme.test{}",
        "<div>".repeat(depth),
        "</div>".repeat(depth)
    );
    assert!(PageText::from_body(html.as_bytes()).too_deep());
    assert!(!PageText::from_body(b"<div><p>info@acme.test</p></div>").too_deep());
}

#[test]
fn entities_are_decoded_once_as_a_browser_does() {
    // The reader sees the text `info&#64;acme.test`, not an address.
    assert!(!is_exact(&find("info&amp;#64;acme.test", "info@acme.test")));
    assert_eq!(
        PageText::from_body(b"<title>Acme &amp; Co</title><p>H<b>i</b></p>").shown_text(),
        " Acme & Co Hi "
    );
}

#[test]
fn obfuscated_forms_are_recognised() {
    for html in [
        "info [at] acme.test",
        "info(at)acme.test",
        "info {at} acme {dot} test",
        "info at acme dot test",
        "INFO [AT] ACME [DOT] TEST",
        "info ＠ acme．test",
        "info @ acme.test",
        "info&#91;at&#93;acme.test",
        "<b>info</b> [at] acme.test",
    ] {
        assert!(
            matches!(find(html, "info@acme.test"), Found::Obfuscated { .. }),
            "{html}"
        );
    }
    assert_eq!(
        find("sinfo [at] acme.test", "info@acme.test"),
        Found::Absent
    );
    assert_eq!(
        find("info [at] acme.tester", "info@acme.test"),
        Found::Absent
    );
}

#[test]
fn an_internationalised_address_is_found_in_either_form() {
    let email = parse_email("info@xn--3e0b707e.xn--3e0b707e").unwrap();
    let text = PageText::from_body("메일: info@한국.한국".as_bytes());
    assert!(is_exact(&text.find(&email)));
    let text = PageText::from_body(b"info@xn--3e0b707e.xn--3e0b707e");
    assert!(is_exact(&text.find(&email)));
}

#[test]
fn the_addresses_on_a_page_are_listed_once_in_order_without_file_names() {
    let text = PageText::from_body(
        br#"<img src="logo@2x.png"> logo@2x.png sales@acme.test, <a href="mailto:info%40acme.test">x</a>
                Sales@acme.test ..press@acme.test <input value="hidden@acme.test">"#,
    );
    assert_eq!(
        text.addresses(10),
        ["sales@acme.test", "info@acme.test", "press@acme.test"],
        "a link's address stands where the link does; hidden ones are not listed"
    );
    assert_eq!(text.addresses(1), ["sales@acme.test"]);
}

#[test]
fn snippets_are_cut_on_character_boundaries() {
    let text = format!("{}info@acme.test{}", "가".repeat(100), "나".repeat(100));
    let s = snippet(&text, 300, 314);
    assert_eq!(s.chars().count(), 80 + 14 + 80);
    assert!(s.starts_with('가') && s.ends_with('나'));
}

#[test]
fn a_body_that_is_not_utf8_keeps_its_ascii_addresses() {
    // "문의" in EUC-KR, then the address.
    let mut body = vec![0xb9, 0xae, 0xc0, 0xc7, b' '];
    body.extend_from_slice(b"info@acme.test");
    assert!(is_exact(
        &PageText::from_body(&body).find(&parse_email("info@acme.test").unwrap())
    ));
}
