//! The review page shows what must be judged (issue 21, point 4): at a
//! phone's 390×844 and a desktop's 1440×900 the result card and the reasons
//! table are on the first screen, nothing covers them (the action bar
//! included), and the reasons table needs no horizontal scrolling.

use serde_json::Value;

use crate::browser::{Window, launch_with, screenshot_on_failure};
use crate::console::{reviews, session};
use crate::helpers::spawn_app;

/// Whether the element `selector` is what the page shows at its centre, on
/// the first screen: `document.elementFromPoint` there is it or inside it.
fn uncovered(selector: &str) -> String {
    format!(
        "const el = document.querySelector('{selector}'); if (!el) return 'missing';
         const r = el.getBoundingClientRect();
         const x = r.left + r.width / 2, y = r.top + r.height / 2;
         if (y > window.innerHeight || x > window.innerWidth) return 'below the first screen at ' + y;
         const hit = document.elementFromPoint(x, y);
         return hit && (hit === el || el.contains(hit)) ? 'shown' : 'covered by ' + (hit ? hit.outerHTML.slice(0, 120) : 'nothing');"
    )
}

#[tokio::test]
async fn the_result_and_the_reasons_are_on_the_first_screen_of_a_phone_and_a_desktop() {
    for (name, width, height) in [("phone", 390, 844), ("desktop", 1440, 900)] {
        let test = format!("review_layout_{name}");
        let window = Window {
            width,
            height,
            ..Window::DESKTOP
        };
        let Some(browser) = launch_with(&test, window).await else {
            return;
        };
        let app = spawn_app().await;
        let (session, agent) = session(&app, 3).await;
        reviews(&app, &agent, &session, 2).await;
        let ana = app.token("reviewer", "ana").await;
        screenshot_on_failure(&test, &[&browser], async {
            browser.sign_in(&app.base, &ana).await;
            browser.open(&format!("{}/ui/review?session={session}", app.base)).await;
            for part in ["[data-result-card]", "[data-reasons] table"] {
                assert_eq!(
                    browser.js(&uncovered(part)).await,
                    Value::from("shown"),
                    "{name}: {part}"
                );
            }
            // The table's box scrolls sideways when its cells do not fit (its
            // wrapper has overflow-x: auto); the card around it must not either.
            for part in ["[data-reasons] .table-wrap", "[data-reasons]"] {
                let fits = browser
                    .js(&format!("const t = document.querySelector('{part}'); return [t.scrollWidth, t.clientWidth];"))
                    .await;
                assert!(fits[0].as_u64() <= fits[1].as_u64(), "{name}: {part} scrolls sideways: {fits}");
            }
            // The first screen, for a person to look at.
            let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ui-layout");
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join(format!("review-{name}.png")), browser.screenshot().await).unwrap();
        })
        .await;
    }
}
