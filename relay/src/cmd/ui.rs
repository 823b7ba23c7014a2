//! `relay ui`: a one-time login link to the root's web view, opened in a browser.

/// Starts a browser on `url` without waiting for it: `$BROWSER`, else the desktop's
/// opener; says so on standard error when there is none.
pub(crate) fn open_browser(url: &str) {
    let mut tried = Vec::new();
    let candidates = std::env::var("BROWSER")
        .ok()
        .filter(|b| !b.trim().is_empty())
        .into_iter()
        .chain(["xdg-open".to_owned(), "open".to_owned()]);
    for program in candidates {
        match std::process::Command::new(&program)
            .arg(url)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
        {
            Ok(_) => {
                eprintln!("opened in {program}; the link works once, for two minutes");
                return;
            }
            Err(_) => tried.push(program),
        }
    }
    eprintln!(
        "no browser to open it ({} not found): open the link above in one; it works once, \
         for two minutes",
        tried.join(", ")
    );
}
