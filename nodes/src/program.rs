//! What a simulated container "does": how long it runs and how it exits, read from its
//! command line (`sleep N`, `exit K`, `sh -c "sleep 2; exit 3"`, `true`, `false`) or from the
//! pod annotation `capstan.io/simulate-duration` (then it exits 0 after that long).
//! Anything else runs until the pod is deleted, as a server would.

use std::time::Duration;

/// Pod annotation overriding every container's run time (exit code 0), e.g. `5s`.
pub(crate) const DURATION_ANNOTATION: &str = "capstan.io/simulate-duration";

/// A container's simulated behaviour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Program {
    /// How long it runs; `None`: until killed.
    pub(crate) run_for: Option<Duration>,
    /// Its exit code when it ends on its own.
    pub(crate) exit_code: i32,
}

impl Program {
    /// A program that never ends by itself.
    pub(crate) const FOREVER: Program = Program {
        run_for: None,
        exit_code: 0,
    };

    /// The behaviour of a container with this `command` and `args`, or of every container
    /// when the pod's annotation `duration` is set.
    pub(crate) fn of(command: &[String], args: &[String], duration: Option<&str>) -> Program {
        if let Some(d) = duration.and_then(parse_duration) {
            return Program {
                run_for: Some(d),
                exit_code: 0,
            };
        }
        let words: Vec<&str> = command.iter().chain(args).map(String::as_str).collect();
        let script = match words.as_slice() {
            [shell, flag, script, ..]
                if is_shell(shell) && flag.starts_with('-') && flag.contains('c') =>
            {
                (*script).to_owned()
            }
            _ => words.join(" "),
        };
        parse_script(&script)
    }
}

fn is_shell(word: &str) -> bool {
    matches!(
        word.rsplit('/').next(),
        Some("sh" | "bash" | "ash" | "dash" | "zsh")
    )
}

/// Reads `sleep N`, `exit K`, `true`, `false` statements separated by `;`, `&&` or `||`;
/// the program ends at the first `exit`/`false` or after its last statement, if every
/// statement was understood.
fn parse_script(script: &str) -> Program {
    let mut total = Duration::ZERO;
    let mut understood = false;
    let normalized = script
        .replace("&&", ";")
        .replace("||", ";")
        .replace('\n', ";");
    for statement in normalized.split(';') {
        let words: Vec<&str> = statement.split_whitespace().collect();
        match words.as_slice() {
            [] => {}
            [cmd, rest @ ..] if cmd.rsplit('/').next() == Some("sleep") => {
                let mut any = false;
                for w in rest {
                    match parse_duration(w) {
                        Some(d) => {
                            total += d;
                            any = true;
                        }
                        None => return Program::FOREVER,
                    }
                }
                if !any {
                    return Program::FOREVER;
                }
                understood = true;
            }
            ["exit"] | ["true"] | [":"] => {
                return Program {
                    run_for: Some(total),
                    exit_code: 0,
                };
            }
            ["exit", code] => {
                return match code.parse::<i32>() {
                    Ok(c) => Program {
                        run_for: Some(total),
                        exit_code: c & 0xff,
                    },
                    Err(_) => Program::FOREVER,
                };
            }
            ["false"] => {
                return Program {
                    run_for: Some(total),
                    exit_code: 1,
                };
            }
            _ => return Program::FOREVER,
        }
    }
    if understood {
        Program {
            run_for: Some(total),
            exit_code: 0,
        }
    } else {
        Program::FOREVER
    }
}

/// Parses `5`, `2.5`, `5s`, `500ms`, `2m`, `1h` (a bare number is seconds, as `sleep`'s).
pub(crate) fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let (number, unit) = match s.find(|c: char| !(c.is_ascii_digit() || c == '.')) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: f64 = number.parse().ok()?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        "d" => n * 86400.0,
        _ => return None,
    };
    if !secs.is_finite() || secs < 0.0 {
        return None;
    }
    Some(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(cmd: &[&str], args: &[&str]) -> Program {
        let c: Vec<String> = cmd.iter().map(|s| (*s).to_owned()).collect();
        let a: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
        Program::of(&c, &a, None)
    }

    #[test]
    fn sleep_and_exit_are_understood_in_command_args_and_shell_scripts() {
        let two = Some(Duration::from_secs(2));
        assert_eq!(p(&["sleep", "2"], &[]).run_for, two);
        assert_eq!(p(&[], &["sleep", "2"]).run_for, two);
        let failing = p(&["/bin/sh", "-c", "sleep 2; exit 3"], &[]);
        assert_eq!((failing.run_for, failing.exit_code), (two, 3));
        assert_eq!(p(&["sh"], &["-c", "exit 3"]).exit_code, 3);
        assert_eq!(p(&["false"], &[]).exit_code, 1);
        assert_eq!(p(&["nginx", "-g", "daemon off;"], &[]), Program::FOREVER);
        assert_eq!(p(&[], &[]), Program::FOREVER);
        assert_eq!(p(&["sleep", "infinity"], &[]), Program::FOREVER);
    }

    #[test]
    fn the_annotation_wins_and_durations_take_units() {
        let x = Program::of(&["nginx".to_owned()], &[], Some("1500ms"));
        assert_eq!(x.run_for, Some(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_duration("x"), None);
    }
}
