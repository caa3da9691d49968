#include "insitubatch/io/http/xml_text.h"

#include <gtest/gtest.h>

namespace insitubatch {
namespace {

TEST(XmlTextTest, UnescapesEntitiesAndReferences) {
  EXPECT_EQ(XmlUnescape("a&amp;b&lt;c&gt;d&quot;e&apos;f").value(), "a&b<c>d\"e'f");
  EXPECT_EQ(XmlUnescape("&#65;&#x42;&#x20AC;&#x1F600;").value(), "AB\xE2\x82\xAC\xF0\x9F\x98\x80");
  EXPECT_EQ(XmlUnescape("plain").value(), "plain");
}

TEST(XmlTextTest, RejectsMalformedEntities) {
  for (const char* bad :
       {"&bogus;", "&amp", "&#;", "&#x;", "&#0;", "&#x110000;", "&#xD800;", "&#12a;", "&#99999999999;"}) {
    EXPECT_FALSE(XmlUnescape(bad).ok()) << bad;
  }
}

TEST(XmlTextTest, FindsElementsByExactTag) {
  const char* xml =
      "<?xml "
      "version=\"1.0\"?><R><KeyCount>2</KeyCount><Contents><Key>a/b</Key></Contents>"
      "<Contents><Key attr=\"1\">c&amp;d</Key></Contents><Key/></R>";
  auto keys = XmlElementTexts(xml, "Key");
  ASSERT_TRUE(keys.ok()) << keys.status().ToString();
  ASSERT_EQ(keys->size(), 3u);
  EXPECT_EQ((*keys)[0], "a/b");
  EXPECT_EQ((*keys)[1], "c&d");
  EXPECT_EQ((*keys)[2], "");
  EXPECT_EQ(XmlElementTexts(xml, "Missing")->size(), 0u);
  EXPECT_EQ(XmlFirstText(xml, "KeyCount"), "2");
}

TEST(XmlTextTest, ElementsCarryTheirOpeningTagsAttributes) {
  auto names =
      XmlElements(R"(<B><Name>a</Name><Name Encoded="true">b%01</Name><Name x='1' Encoded='true'/></B>)", "Name");
  ASSERT_TRUE(names.ok()) << names.status().ToString();
  ASSERT_EQ(names->size(), 3u);
  EXPECT_EQ((*names)[0].attributes, "");
  EXPECT_FALSE(XmlHasAttribute((*names)[0].attributes, "Encoded", "true"));
  EXPECT_EQ((*names)[1].text, "b%01");
  EXPECT_TRUE(XmlHasAttribute((*names)[1].attributes, "Encoded", "true"));
  EXPECT_FALSE(XmlHasAttribute((*names)[1].attributes, "Encoded", "false"));
  EXPECT_EQ((*names)[2].text, "");
  EXPECT_TRUE(XmlHasAttribute((*names)[2].attributes, "Encoded", "true"));
  EXPECT_TRUE(XmlHasAttribute((*names)[2].attributes, "x", "1"));
  // A whole attribute name, not the end of a longer one.
  EXPECT_FALSE(XmlHasAttribute(R"( NotEncoded="true")", "Encoded", "true"));
}

TEST(XmlTextTest, MalformedDocumentsAreErrorsNotGuesses) {
  EXPECT_FALSE(XmlElementTexts("<Key>abc", "Key").ok());             // never closed
  EXPECT_FALSE(XmlElementTexts("<Key", "Key").ok());                 // truncated tag
  EXPECT_FALSE(XmlElementTexts("<Key attr", "Key").ok());            // unclosed tag
  EXPECT_FALSE(XmlElementTexts("<Key><b>x</b></Key>", "Key").ok());  // markup in text
  EXPECT_FALSE(XmlElementTexts("<Key>&nope;</Key>", "Key").ok());
  EXPECT_EQ(XmlFirstText("<Key>abc", "Key"), "");  // best effort: empty on error
}

}  // namespace
}  // namespace insitubatch
