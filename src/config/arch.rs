//! Which AMI a type is launched from, pure: a type runs the architectures
//! DescribeInstanceTypes says, an AMI has the one DescribeImages says, and
//! a type is launched only from an AMI of one of its own architectures
//! ([`fit`]). A type no AMI fits is skipped, and the reason names the type,
//! its architectures and every AMI's.
//!
//! Invariant: [`fit`] never pairs a type with an AMI whose architecture
//! (as DescribeImages told it) the type doesn't run, nor with an AMI whose
//! architecture can't be told, nor with one given under another
//! architecture's key than its own.

use std::collections::BTreeMap;

/// The keys `ami = { ... }` takes: EC2's names of the architectures an
/// instance type runs (DescribeInstanceTypes' `supportedArchitectures`,
/// DescribeImages' `architecture`).
pub const AMI_KEYS: &[&str] = &["x86_64", "arm64"];

/// The architectures a type may run, in the order one is picked when it
/// runs several (the 64-bit ones first).
const PREFERENCE: &[&str] = &["arm64", "x86_64", "i386"];

/// An AMI a machine may boot from, as the settings give it and
/// DescribeImages tells it.
#[derive(Clone, Debug, PartialEq)]
pub struct Ami<'a> {
    /// The key it was given under (`None`: the single `ami = "..."`).
    pub key: Option<&'a str>,
    /// Its id.
    pub id: &'a str,
    /// Its architecture, or why it can't be told.
    pub arch: Result<String, String>,
}

/// What a type comes to.
#[derive(Clone, Debug, PartialEq)]
pub enum Fit {
    /// Launched from `ami`, running architecture `arch` (EC2's name).
    Launch {
        /// The AMI.
        ami: String,
        /// The architecture the machine runs.
        arch: String,
    },
    /// Skipped: why, naming the type, its architectures and the AMIs'.
    Skip(String),
}

/// The AMIs of a machine's settings, in the order they are looked at:
/// the single `ami` (any architecture), else the table's, by key.
pub fn amis_of<'a>(
    ami: Option<&'a str>,
    amis: &'a BTreeMap<String, String>,
) -> Vec<(Option<&'a str>, &'a str)> {
    match ami {
        Some(a) => vec![(None, a)],
        None => amis
            .iter()
            .map(|(k, v)| (Some(k.as_str()), v.as_str()))
            .collect(),
    }
}

/// The AMI type `type_` (which runs `type_arches`) is launched from, of
/// `amis`: one whose architecture the type runs (the preferred of the
/// type's architectures first, [`PREFERENCE`]), given under its own
/// architecture's key if under one; else the type is skipped, saying why.
pub fn fit(type_: &str, type_arches: &[String], amis: &[Ami]) -> Fit {
    let mut ranked: Vec<&String> = type_arches.iter().collect();
    ranked.sort_by_key(|a| {
        PREFERENCE
            .iter()
            .position(|p| p == a)
            .unwrap_or(PREFERENCE.len())
    });
    for want in ranked {
        let usable = amis
            .iter()
            .find(|a| a.arch.as_deref() == Ok(want.as_str()) && a.key.is_none_or(|k| k == want));
        if let Some(a) = usable {
            return Fit::Launch {
                ami: a.id.to_string(),
                arch: want.clone(),
            };
        }
    }
    let said: Vec<String> = amis
        .iter()
        .map(|a| match (&a.arch, a.key) {
            (Err(e), _) => format!("{}'s architecture can't be told ({e})", a.id),
            (Ok(arch), Some(k)) if k != arch => {
                format!("{} (given for {k}) is {arch}: never launched", a.id)
            }
            (Ok(arch), _) => format!("{} is {arch}", a.id),
        })
        .collect();
    let runs = if type_arches.is_empty() {
        "no architecture known".to_string()
    } else {
        type_arches.join(", ")
    };
    Fit::Skip(format!(
        "type {type_} skipped: no AMI fits it (it runs {runs}; {})",
        if said.is_empty() {
            "no AMI given".to_string()
        } else {
            said.join(", ")
        }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ami<'a>(key: Option<&'a str>, id: &'a str, arch: &str) -> Ami<'a> {
        Ami {
            key,
            id,
            arch: Ok(arch.to_string()),
        }
    }

    fn arches(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    fn mixed() -> Vec<Ami<'static>> {
        vec![
            ami(Some("arm64"), "ami-arm", "arm64"),
            ami(Some("x86_64"), "ami-x86", "x86_64"),
        ]
    }

    #[test]
    fn each_type_gets_the_ami_of_its_architecture() {
        assert_eq!(
            fit("m7g.large", &arches(&["arm64"]), &mixed()),
            Fit::Launch {
                ami: "ami-arm".into(),
                arch: "arm64".into()
            }
        );
        assert_eq!(
            fit("t3.micro", &arches(&["i386", "x86_64"]), &mixed()),
            Fit::Launch {
                ami: "ami-x86".into(),
                arch: "x86_64".into()
            }
        );
    }

    #[test]
    fn a_single_ami_fits_only_the_types_of_its_architecture() {
        let one = [ami(None, "ami-x86", "x86_64")];
        assert!(matches!(
            fit("m7i.large", &arches(&["x86_64"]), &one),
            Fit::Launch { .. }
        ));
        let Fit::Skip(why) = fit("m7g.large", &arches(&["arm64"]), &one) else {
            panic!("an arm64 type launched from an x86_64 AMI");
        };
        assert_eq!(
            why,
            "type m7g.large skipped: no AMI fits it (it runs arm64; ami-x86 is x86_64)"
        );
    }

    #[test]
    fn an_ami_given_under_another_architecture_is_never_launched() {
        // The arm64 key names an x86_64 AMI: not even an x86 type gets it
        // through that key, and the Graviton type is skipped.
        let wrong = [ami(Some("arm64"), "ami-x86", "x86_64")];
        assert!(matches!(
            fit("m7i.large", &arches(&["x86_64"]), &wrong),
            Fit::Skip(_)
        ));
        let Fit::Skip(why) = fit("m7g.large", &arches(&["arm64"]), &wrong) else {
            panic!("launched");
        };
        assert!(
            why.contains("ami-x86 (given for arm64) is x86_64: never launched"),
            "{why}"
        );
    }

    #[test]
    fn an_ami_whose_architecture_cannot_be_told_is_not_launched() {
        let unknown = [Ami {
            key: None,
            id: "ami-gone",
            arch: Err("InvalidAMIID.NotFound: no such AMI".into()),
        }];
        let Fit::Skip(why) = fit("m7i.large", &arches(&["x86_64"]), &unknown) else {
            panic!("launched");
        };
        assert!(why.contains("ami-gone's architecture can't be told (InvalidAMIID"));
        assert!(matches!(
            fit("m7i.large", &arches(&[]), &mixed()),
            Fit::Skip(w) if w.contains("no architecture known")
        ));
        assert!(matches!(
            fit("m7i.large", &arches(&["x86_64"]), &[]),
            Fit::Skip(w) if w.contains("no AMI given")
        ));
    }

    #[test]
    fn a_type_of_several_architectures_takes_the_preferred_one_an_ami_has() {
        let x86 = [ami(None, "ami-32", "i386"), ami(None, "ami-64", "x86_64")];
        assert_eq!(
            fit("t2.micro", &arches(&["i386", "x86_64"]), &x86),
            Fit::Launch {
                ami: "ami-64".into(),
                arch: "x86_64".into()
            }
        );
    }

    #[test]
    fn the_single_ami_wins_over_a_table_and_a_table_is_read_by_key() {
        let table = BTreeMap::from([
            ("x86_64".to_string(), "ami-x".to_string()),
            ("arm64".to_string(), "ami-a".to_string()),
        ]);
        assert_eq!(amis_of(Some("ami-1"), &table), [(None, "ami-1")]);
        assert_eq!(
            amis_of(None, &table),
            [(Some("arm64"), "ami-a"), (Some("x86_64"), "ami-x")]
        );
    }
}
