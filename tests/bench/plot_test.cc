// rankd-bench sweep's writers: the SVG is well-formed XML with the expected elements and every
// coordinate inside the canvas; CSV rows quote what needs quoting.
#include "plot.h"

#include <expat.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace rankd::bench {
namespace {

struct Parsed {
  bool well_formed = false;
  std::string error;
  std::map<std::string, int> elements;  // by name
  std::vector<std::string> texts;       // character data of <text> elements
  std::vector<double> coordinates;      // x*, y*, cx, cy and polyline points
  std::string root;
  bool in_text = false;
};

Parsed ParseSvg(const std::string& svg) {
  Parsed p;
  XML_Parser parser = XML_ParserCreate("UTF-8");
  XML_SetUserData(parser, &p);
  struct State {
    static void Start(void* data, const XML_Char* name, const XML_Char** attrs) {
      auto* p = static_cast<Parsed*>(data);
      if (p->root.empty()) p->root = name;
      ++p->elements[name];
      if (std::string(name) == "text") {
        p->texts.emplace_back();
        p->in_text = true;
      }
      for (int i = 0; attrs[i]; i += 2) {
        const std::string key = attrs[i], value = attrs[i + 1];
        if (key == "x" || key == "y" || key == "x1" || key == "x2" || key == "y1" || key == "y2" ||
            key == "cx" || key == "cy") {
          p->coordinates.push_back(std::stod(value));
        } else if (key == "points") {
          std::string v = value;
          for (char& c : v) c = c == ',' ? ' ' : c;
          std::istringstream in(v);
          for (double d; in >> d;) p->coordinates.push_back(d);
        }
      }
    }
    static void End(void* data, const XML_Char*) { static_cast<Parsed*>(data)->in_text = false; }
    static void Chars(void* data, const XML_Char* s, int len) {
      auto* p = static_cast<Parsed*>(data);
      if (p->in_text) p->texts.back().append(s, len);
    }
  };
  XML_SetElementHandler(parser, &State::Start, &State::End);
  XML_SetCharacterDataHandler(parser, &State::Chars);
  p.well_formed = XML_Parse(parser, svg.data(), static_cast<int>(svg.size()), 1) == XML_STATUS_OK;
  if (!p.well_formed) p.error = XML_ErrorString(XML_GetErrorCode(parser));
  XML_ParserFree(parser);
  return p;
}

TEST(PlotTest, SvgIsWellFormedWithOneLinePerSeries) {
  LinePlot plot{"items/s vs Ni <tq 50 & ti 150>",
                "items per request (Ni)",
                "items/s \"scored\"",
                {{"concurrency 1", {{10, 1200.5}, {50, 4100}, {100, 4700}, {250, 5200}}},
                 {"concurrency 4 & more", {{10, 3000}, {50, 6100}, {100, NAN}, {250, 6500}}},
                 {"no points", {}}}};
  const std::string svg = RenderSvg(plot);
  const Parsed p = ParseSvg(svg);
  ASSERT_TRUE(p.well_formed) << p.error << "\n" << svg;
  EXPECT_EQ(p.root, "svg");
  EXPECT_EQ(p.elements.at("polyline"), 2);  // the empty series draws no line
  EXPECT_EQ(p.elements.at("circle"), 7);    // the NaN point is left out
  bool title = false, legend = false;
  for (const std::string& t : p.texts) {
    title |= t == plot.title;  // escaped in the file, intact once parsed
    legend |= t == "concurrency 4 & more";
  }
  EXPECT_TRUE(title);
  EXPECT_TRUE(legend);
  for (double c : p.coordinates) {
    EXPECT_TRUE(std::isfinite(c));
    EXPECT_GE(c, 0);
    EXPECT_LE(c, 640);
  }
}

TEST(PlotTest, DegenerateInputsStillGiveAValidPlot) {
  for (const LinePlot& plot :
       {LinePlot{"empty", "x", "y", {}}, LinePlot{"one point", "x", "y", {{"s", {{3, 7}}}}},
        LinePlot{"flat zero", "x", "y", {{"s", {{1, 0}, {2, 0}}}}},
        LinePlot{"negative", "x", "y", {{"s", {{-5, -2}, {5, 3}}}}}}) {
    const Parsed p = ParseSvg(RenderSvg(plot));
    ASSERT_TRUE(p.well_formed) << plot.title << ": " << p.error;
    for (double c : p.coordinates) {
      EXPECT_TRUE(std::isfinite(c) && c >= 0 && c <= 640) << plot.title << ": " << c;
    }
  }
}

TEST(PlotTest, NiceTicksAreRoundAndCoverTheRange) {
  EXPECT_EQ(NiceTicks(0, 10, 5), (std::vector<double>{0, 2, 4, 6, 8, 10}));
  EXPECT_EQ(NiceTicks(10, 250, 6), (std::vector<double>{50, 100, 150, 200, 250}));
  const std::vector<double> t = NiceTicks(0, 5230, 5);
  EXPECT_EQ(t.front(), 0);
  EXPECT_GE(t.back(), 4000);
}

TEST(CsvTest, QuotesFieldsThatNeedIt) {
  EXPECT_EQ(CsvRow({"engine", "50", "1234.5"}), "engine,50,1234.5\n");
  EXPECT_EQ(CsvRow({"a,b", "say \"hi\"", "two\nlines", ""}),
            "\"a,b\",\"say \"\"hi\"\"\",\"two\nlines\",\n");
}

}  // namespace
}  // namespace rankd::bench
