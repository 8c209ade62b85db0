//! DescribeImages: the architecture of an AMI (EC2's name: `x86_64`,
//! `arm64`, ...), which decides the types it may be launched as
//! (`config::arch::fit`). Callers cache the answer per AMI
//! (the EC2 provider): an AMI's architecture never changes.

use super::{Client, Ec2Error};

impl Client {
    /// The architecture of AMI `ami`, as DescribeImages tells it. An AMI
    /// this account can't see (or that is gone) is refused
    /// (`InvalidAMIID.NotFound`, as EC2 says it or with no image answered).
    pub fn image_architecture(&mut self, ami: &str) -> Result<String, Ec2Error> {
        let xml = self.call("DescribeImages", &[("ImageId.1".into(), ami.into())])?;
        architecture_of(&xml, ami)
    }
}

/// The `architecture` of image `ami` in a DescribeImages answer.
pub fn architecture_of(xml: &str, ami: &str) -> Result<String, Ec2Error> {
    let doc = roxmltree::Document::parse(xml)
        .map_err(|e| Ec2Error::Unreachable(format!("DescribeImages: unreadable answer: {e}")))?;
    let image = doc.descendants().find(|n| {
        n.has_tag_name("item")
            && n.children()
                .any(|c| c.has_tag_name("imageId") && c.text().map(str::trim) == Some(ami))
    });
    image
        .and_then(|i| i.children().find(|c| c.has_tag_name("architecture")))
        .and_then(|a| a.text())
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
        .ok_or_else(|| {
            Ec2Error::Refused(
                "InvalidAMIID.NotFound".into(),
                format!("DescribeImages answered no image {ami} with an architecture"),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_images_architecture_is_read_and_a_missing_image_refused() {
        let xml = r#"<DescribeImagesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><requestId>x</requestId><imagesSet><item><imageId>ami-0abc</imageId><imageState>available</imageState><architecture>arm64</architecture><blockDeviceMapping><item><deviceName>/dev/xvda</deviceName></item></blockDeviceMapping></item></imagesSet></DescribeImagesResponse>"#;
        assert_eq!(architecture_of(xml, "ami-0abc").unwrap(), "arm64");
        let err = architecture_of(xml, "ami-other").unwrap_err();
        assert!(
            err.to_string().starts_with("InvalidAMIID.NotFound"),
            "{err}"
        );
        let empty = r#"<DescribeImagesResponse><imagesSet/></DescribeImagesResponse>"#;
        assert!(architecture_of(empty, "ami-0abc").is_err());
    }
}
